//! The Chat screen's logic: send, stream, stop, regenerate, edit-and-resend, copy, feature
//! chips, the TTFT and tok/s readout, saving to the encrypted history.
//!
//! Replies come from a [`Responder`] on a worker thread, as [`ReplyEvent`]s: tokens,
//! `Withdrawn` (the guard took back what was shown; its notice replaces it) and a final
//! [`Verdict`] with the category the guard may show. The app's responder is [`GuardedResponder`]: the
//! model behind the always-resident guard, through the same pipeline as the terminal chat.
//! Tests script the seam instead (controllers/tests.rs).

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Instant;

use kostant_engine::{
    ActiveAdapter, CancelHandle, EngineError, GenerateRequest, KvType, Message, Model,
    SamplingParams, Session, SnapshotHeader, Speculation,
};
use kostant_safety::{pipeline, Guard};
pub use kostant_safety::{StoppedBy, Verdict};

use super::prefixes::SystemPrefixes;
use super::{AppError, Notify, SharedStore};
use crate::feature_adapters::FeatureAdapters;
use crate::history::context::{ContextKeeper, ContextSave};
use crate::history::Role;

pub use crate::features::Feature;

/// Sampling and length settings for the next reply (the Settings screen edits them).
#[derive(Clone, Debug, PartialEq)]
pub struct GenerationSettings {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub max_tokens: usize,
    /// Context window in tokens; the memory budget on the Settings screen caps it.
    pub n_ctx: usize,
    /// How the context's keys and values are stored: the smaller types fit a longer context
    /// in the same memory and change the replies a little (Settings' "Context memory").
    pub kv_type: KvType,
    /// Fixed seed, or a new one per reply.
    pub seed: Option<u64>,
}

impl Default for GenerationSettings {
    /// The CLI's defaults, with a phone-sized context.
    fn default() -> Self {
        GenerationSettings {
            temperature: 0.7,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.1,
            max_tokens: 512,
            n_ctx: 2048,
            kv_type: KvType::F16,
            seed: None,
        }
    }
}

impl GenerationSettings {
    pub fn sampling(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: 64,
            seed: self.seed.unwrap_or_else(time_seed),
        }
    }
}

/// One reply to produce: the system prompt and the conversation so far, ending with the user.
#[derive(Clone, Debug)]
pub struct ReplyRequest {
    pub system: String,
    /// The feature the reply is for: the responder puts its shipped adapter on when the model
    /// is the one it was trained on.
    pub feature: Feature,
    pub turns: Vec<Message>,
    pub settings: GenerationSettings,
    /// The history conversation the reply will be saved into (None: a new one).
    pub conversation: Option<i64>,
    /// Whether the responder's context belongs to this conversation.
    pub origin: ContextOrigin,
}

/// How the responder's kept context relates to the conversation a request continues.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ContextOrigin {
    /// The conversation on screen goes on: the context the responder kept is its.
    #[default]
    Continued,
    /// Another conversation was opened from the history (with its saved context, if any) or a
    /// new one started: what the responder kept belongs to another.
    /// (Boxed: the request goes through a channel, and a saved context is large.)
    Switched(Option<Box<crate::history::SavedContext>>),
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplyStats {
    pub prompt_tokens: usize,
    /// Prompt tokens already in the cache (kept from the last turn, or restored from the
    /// conversation's saved context): not read again.
    pub reused_tokens: usize,
    pub generated_tokens: usize,
    pub ttft_ms: f64,
    pub decode_tok_s: f64,
    /// The adapter the reply ran under (its feature's), if any.
    pub adapter: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ReplyOutcome {
    /// The reply as it should stand in the conversation.
    pub text: String,
    pub verdict: Verdict,
    pub stats: Option<ReplyStats>,
    /// The context to save beside the conversation with the exchange (None: the responder
    /// keeps none).
    pub context: Option<ContextSave>,
    /// Why a saved context was not restored (the conversation was read again instead).
    pub notice: Option<String>,
}

/// What a [`Responder`] reports while producing one reply.
#[derive(Clone, Debug, PartialEq)]
pub enum ReplyEvent {
    Token(String),
    /// The guard withdrew bytes `from..to` of the text shown so far: `notice` takes their
    /// place (the pipeline's `Withdraw`).
    Withdrawn {
        from: usize,
        to: usize,
        notice: String,
    },
    Done(ReplyOutcome),
    Failed(String),
}

/// Produces replies, on the chat's worker thread. Every call ends by emitting exactly one
/// `Done` or `Failed`.
pub trait Responder: Send {
    fn respond(
        &mut self,
        req: &ReplyRequest,
        cancel: &CancelHandle,
        emit: &mut dyn FnMut(ReplyEvent),
    );
}

/// What the Settings screen shows of the loaded model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSummary {
    pub name: String,
    pub quantization: String,
    pub path: PathBuf,
    pub file_bytes: u64,
    /// The engine's planned footprint (`Model::memory_plan_with_kv`: weights read, kv cache,
    /// scratch; what `kostant --memory-budget` checks) for contexts of 256, 512, … tokens up
    /// to the training context, for each cache type this model's heads allow, plus what the
    /// guard holds beside the chat ([`crate::guard_model::guard_bytes`]): the Settings screen
    /// picks the largest that fits the budget.
    pub memory_plans: Vec<ContextPlan>,
    pub n_ctx_train: usize,
    /// [`crate::feature_adapters::fingerprint_hex`]: which shipped adapters apply to it.
    pub fingerprint: String,
}

/// One entry of [`ModelSummary::memory_plans`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextPlan {
    pub kv_type: KvType,
    pub n_ctx: usize,
    /// The whole planned footprint.
    pub total: u64,
    /// Of which the kv cache.
    pub kv: u64,
    /// Of which the safety guard's own session, and its own model's weights when it reads
    /// with another model than the chat's.
    pub guard: u64,
}

/// The model and the guard, resident for the app's life: every message and reply goes
/// through [`kostant_safety::pipeline::respond`], as the terminal chat's do, so the app shows
/// what the CLI shows (the policy's refusal, or the withdrawal notice in place of a reply the
/// guard stopped).
pub struct GuardedResponder {
    model: Arc<Model>,
    guard: Guard,
    /// Kept between replies so the next one reuses the cached prefix.
    session: Option<Session>,
    /// What of the session's context is saved for which conversation.
    keeper: ContextKeeper,
    /// The system prompts already read, so a new chat starts after its own.
    prefixes: SystemPrefixes,
    /// The features' shipped adapters, loaded once each.
    adapters: FeatureAdapters,
}

impl GuardedResponder {
    /// Starts the kernel thread pool (`threads`, 0 = all cores), maps the model and starts the
    /// guard on it with the head built into the app (`kostant_assets::GUARD_HEAD`). A guard
    /// that cannot start is a load failure: the app never answers unscreened.
    pub fn load(path: &Path, threads: usize) -> Result<(GuardedResponder, ModelSummary), AppError> {
        kostant_kernels::init_threads(threads).map_err(|e| AppError::Threads(e.to_string()))?;
        let model = shared_model(path)?;
        let guard = crate::guard_model::guard_for(&model, path)?;
        let summary = ModelSummary::of(&model, path, &guard);
        Ok((
            GuardedResponder {
                adapters: FeatureAdapters::new(model.clone()),
                model,
                guard,
                session: None,
                keeper: ContextKeeper::new(),
                prefixes: SystemPrefixes::default(),
            },
            summary,
        ))
    }

    /// How often a system prompt was read, and how often a kept one served a new chat.
    pub fn system_prompts(&self) -> super::prefixes::PrefixCounts {
        self.prefixes.counts()
    }

    /// The guard, to tune its thresholds (a test forces a withdrawal with an output threshold
    /// of 0).
    pub fn guard_mut(&mut self) -> &mut Guard {
        &mut self.guard
    }

    fn run(
        &mut self,
        req: &ReplyRequest,
        cancel: &CancelHandle,
        emit: &mut dyn FnMut(ReplyEvent),
    ) -> Result<(), AppError> {
        let user = match req.turns.last() {
            Some(m) if m.role == kostant_engine::Role::User => m.content.clone(),
            _ => return Err(AppError::Nothing("user message to reply to")),
        };
        // Looked up before the session is taken, so a failure keeps the session.
        let adapter = self.adapters.get(req.feature)?.ok();
        let n_ctx = req.settings.n_ctx.min(self.model.hparams.n_ctx_train);
        let mut session = match self.session.take() {
            Some(s) if s.n_ctx() == n_ctx && s.kv_type() == req.settings.kv_type => s,
            other => {
                // Another context size or cache type (Settings changed): a new session, and
                // what the keeper saved belongs to the old one.
                let made = Session::with_kv_type(self.model.clone(), n_ctx, req.settings.kv_type);
                match made {
                    Ok(s) => {
                        self.keeper.forget();
                        s
                    }
                    Err(e) => {
                        self.session = other;
                        return Err(e.into());
                    }
                }
            }
        };
        // The feature's adapter goes on first: the session forgets rows computed under
        // another, and a saved context is restored only under the adapter it was saved with.
        let before = session.adapter().map(ActiveAdapter::id);
        if let Err(e) = session.set_adapter(adapter) {
            self.session = Some(session);
            return Err(e.into());
        }
        if session.adapter().map(ActiveAdapter::id) != before {
            self.keeper.forget();
        }
        let mut notice = None;
        if let ContextOrigin::Switched(saved) = &req.origin {
            // The cache may keep its tokens: the next prompt reuses only the prefix it shares
            // with them (the system prompt), never another conversation's turns.
            self.keeper.forget();
            if let (Some(saved), Some(id)) = (saved, req.conversation) {
                if let Err(e) = self.keeper.restore_saved(id, saved, &mut session) {
                    notice = Some(not_restored_notice(&saved.header, &session, &e));
                }
            }
        }
        let fitted = fit_prompt(
            &self.model,
            Some(&req.system),
            &req.turns,
            req.settings.max_tokens,
            session.n_ctx(),
        );
        let prompt = match fitted {
            Ok((p, _dropped)) => p,
            Err(e) => {
                self.session = Some(session);
                return Err(e.into());
            }
        };
        match self.prefixes.prepare(&mut session, &req.system, &prompt) {
            Ok(None) => {}
            // The session now holds only the system prompt: what was saved of it is gone.
            Ok(Some(_)) => self.keeper.forget(),
            Err(e) => {
                self.keeper.forget();
                session.reset();
                self.session = Some(session);
                return Err(e);
            }
        }
        let budget = req
            .settings
            .max_tokens
            .min(session.n_ctx().saturating_sub(prompt.len()))
            .max(1);
        let gen = GenerateRequest {
            prompt,
            max_tokens: budget,
            sampling: req.settings.sampling(),
            speculation: Speculation::default(),
        };
        let result =
            pipeline::respond(
                &mut session,
                &mut self.guard,
                &gen,
                &user,
                cancel,
                |ev| match ev {
                    pipeline::ReplyEvent::Token(t) if !t.is_empty() => {
                        emit(ReplyEvent::Token(t.clone()))
                    }
                    pipeline::ReplyEvent::Token(_) => {}
                    pipeline::ReplyEvent::Withdraw { from, to, notice } => {
                        emit(ReplyEvent::Withdrawn {
                            from: *from,
                            to: *to,
                            notice: notice.clone(),
                        })
                    }
                },
            );
        let reply = match result {
            Ok(r) => r,
            Err(e) => {
                // What the keeper saved may no longer match the session: start over.
                self.keeper.forget();
                self.session = Some(session);
                return Err(e.into());
            }
        };
        let context = self.keeper.plan(req.conversation, &session);
        let adapter = session.adapter().map(|a| a.adapter.name().to_string());
        self.session = Some(session);
        let verdict = reply.verdict;
        let stats = reply.generation.as_ref().map(|g| ReplyStats {
            prompt_tokens: g.stats.prompt_tokens,
            reused_tokens: g.stats.reused_tokens,
            generated_tokens: g.stats.generated_tokens,
            ttft_ms: g.stats.ttft_ms,
            decode_tok_s: g.stats.decode_tok_s,
            adapter: adapter.clone(),
        });
        emit(ReplyEvent::Done(ReplyOutcome {
            text: reply.text,
            verdict,
            stats,
            context: Some(context),
            notice,
        }));
        Ok(())
    }
}

/// What the chat says when a saved context was not restored and the conversation was read
/// again: a Context memory choice changed since it was saved is said in Settings' words (the
/// engine's reason names cache types); anything else with its reason.
pub fn not_restored_notice(
    saved_header: &[u8],
    session: &Session,
    error: &impl std::fmt::Display,
) -> String {
    let now = session.snapshot_header();
    // The saved header with today's cache type: if that one fits, the type is all that differs.
    let saved_type = SnapshotHeader::from_bytes(saved_header)
        .ok()
        .filter(|h| h.kv_type != now.kv_type)
        .filter(|h| {
            let retyped = SnapshotHeader {
                kv_type: now.kv_type,
                ..h.clone()
            };
            retyped.mismatch(&now).is_none()
        })
        .map(|h| h.kv_type);
    match saved_type {
        Some(saved) => format!(
            "This conversation was kept with the {} context memory and Settings now use {}, so it was read again.",
            super::settings::kv_words(saved).0,
            super::settings::kv_words(now.kv_type).0
        ),
        _ => format!(
            "This conversation's saved context could not be used ({error}), so it was read again."
        ),
    }
}

impl Responder for GuardedResponder {
    fn respond(
        &mut self,
        req: &ReplyRequest,
        cancel: &CancelHandle,
        emit: &mut dyn FnMut(ReplyEvent),
    ) {
        if let Err(e) = self.run(req, cancel, emit) {
            emit(ReplyEvent::Failed(e.to_string()));
        }
    }
}

impl ModelSummary {
    /// What Settings shows of `model` (mapped from `path`), chatting under `guard`.
    fn of(model: &Arc<Model>, path: &Path, guard: &Guard) -> ModelSummary {
        let hp = &model.hparams;
        let guard_at = |n_ctx| crate::guard_model::guard_bytes(guard, model, n_ctx);
        ModelSummary {
            name: model.name(),
            quantization: model.quantization().to_string(),
            path: path.to_path_buf(),
            file_bytes: model.file_bytes() as u64,
            memory_plans: KvType::ALL
                .into_iter()
                .filter(|t| t.fits_heads(hp.head_dim))
                .flat_map(|kv_type| {
                    (1..=hp.n_ctx_train.clamp(256, 1 << 17) / 256).map(move |i| {
                        let plan = model.memory_plan_with_kv(256 * i, kv_type);
                        let guard = guard_at(256 * i);
                        ContextPlan {
                            kv_type,
                            n_ctx: 256 * i,
                            total: plan.total() as u64 + guard,
                            kv: plan.kv as u64,
                            guard,
                        }
                    })
                })
                .collect(),
            n_ctx_train: hp.n_ctx_train,
            fingerprint: crate::feature_adapters::fingerprint_hex(model),
        }
    }
}

/// The model at `path`, mapped once however many parts of the app ask (the chat and its
/// guard, the eval runner): later calls get the same `Arc` while any holder keeps it alive.
pub fn shared_model(path: &Path) -> Result<Arc<Model>, AppError> {
    static LOADED: Mutex<Vec<(PathBuf, Weak<Model>)>> = Mutex::new(Vec::new());
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    // A poisoned lock only means another loader panicked; the list itself is still sound.
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    loaded.retain(|(_, w)| w.strong_count() > 0);
    if let Some(m) = loaded
        .iter()
        .find(|(p, _)| *p == key)
        .and_then(|(_, w)| w.upgrade())
    {
        return Ok(m);
    }
    let model = Model::load(path)?;
    loaded.push((key, Arc::downgrade(&model)));
    Ok(model)
}

/// The conversation (`system`, then `turns` ending with the newest user message) as prompt
/// tokens, dropping the oldest exchanges while it does not fit `n_ctx` with room for a short
/// reply (`max_tokens`, at most 64); the newest message is never dropped. Returns the tokens
/// and how many of the oldest turns were left out.
pub fn fit_prompt(
    model: &Model,
    system: Option<&str>,
    turns: &[Message],
    max_tokens: usize,
    n_ctx: usize,
) -> Result<(Vec<u32>, usize), EngineError> {
    let mut dropped = 0;
    loop {
        let kept = &turns[dropped..];
        let mut messages = Vec::with_capacity(kept.len() + 1);
        if let Some(s) = system {
            messages.push(Message::new(kostant_engine::Role::System, s));
        }
        messages.extend(kept.iter().cloned());
        let rendered = model
            .chat_template
            .render(&model.tokenizer, &messages, true)?;
        let room = max_tokens.min(64);
        if rendered.tokens.len() + room <= n_ctx {
            return Ok((rendered.tokens, dropped));
        }
        if kept.len() <= 1 {
            return Err(EngineError::ContextOverflow {
                prompt_tokens: rendered.tokens.len() + room,
                context: n_ctx,
            });
        }
        // Forget the oldest exchange (a user turn and its reply), never the newest message.
        dropped += 2.min(kept.len() - 1);
    }
}

/// Builds the responder on the worker thread (loading a model takes a moment; the window is
/// up meanwhile).
pub type ResponderFactory = Box<dyn FnOnce() -> LoadResult + Send>;

/// What a [`ResponderFactory`] gives: the responder and what it runs, or why it could not load.
pub type LoadResult = Result<(Box<dyn Responder>, ModelSummary), AppError>;

/// The default factory: the real model at `path` behind the guard, kernels on the performance
/// cores.
pub fn guarded_factory(path: PathBuf) -> ResponderFactory {
    Box::new(move || {
        let (r, s) = GuardedResponder::load(&path, kostant_platform::cpu::performance_cores())?;
        Ok((Box::new(r) as Box<dyn Responder>, s))
    })
}

/// The conversation on screen as the model is sent it: without failed messages, and without
/// an exchange the guard refused or withdrew (the user's message and the refusal or notice),
/// which stays on screen and in the history but leaves the model's context
/// ([`kostant_safety::close_exchange`]).
pub(crate) fn model_context(messages: &[ChatMessage]) -> Vec<Message> {
    let mut turns: Vec<Message> = Vec::with_capacity(messages.len());
    for m in messages {
        if m.role == Role::System || m.status == MessageStatus::Failed {
            continue;
        }
        if m.role == Role::User {
            turns.push(Message::new(kostant_engine::Role::User, m.text.clone()));
            continue;
        }
        // Only whether the guard ended the exchange matters here, not the category it named.
        let verdict = match m.status {
            MessageStatus::Refused => Verdict::Refused { category: None },
            MessageStatus::Withdrawn => Verdict::Stopped {
                by: StoppedBy::Guard,
                category: None,
            },
            MessageStatus::Stopped => Verdict::Stopped {
                by: StoppedBy::User,
                category: None,
            },
            _ => Verdict::Answered,
        };
        kostant_safety::close_exchange(&mut turns, m.text.clone(), verdict);
    }
    turns
}

/// How a message on screen stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageStatus {
    Done,
    /// Tokens are still arriving.
    Streaming,
    Stopped,
    /// The guard withdrew the reply; the text is its notice.
    Withdrawn,
    /// The guard refused; the text is the refusal.
    Refused,
    Failed,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ChatMessage {
    pub role: Role,
    pub text: String,
    pub status: MessageStatus,
    /// How the reply ended (replies that finished in this session; `None` while streaming,
    /// for the user's messages and for replies reopened from the history).
    pub verdict: Option<Verdict>,
    /// Saved to the history as the last exchange (so regenerate can replace it there).
    saved: bool,
}

impl ChatMessage {
    fn new(role: Role, text: impl Into<String>, status: MessageStatus) -> ChatMessage {
        ChatMessage {
            role,
            text: text.into(),
            status,
            verdict: None,
            saved: false,
        }
    }
}

/// The model as the chat sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelState {
    Loading,
    Ready(ModelSummary),
    Failed(String),
}

enum WorkerMsg {
    Ready(ModelSummary),
    LoadFailed(String),
    Reply(u64, ReplyEvent),
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
    started: Instant,
    first_token: Option<Instant>,
    tokens: usize,
}

pub struct ChatController {
    jobs: Option<mpsc::Sender<(u64, ReplyRequest)>>,
    events: mpsc::Receiver<WorkerMsg>,
    worker: Option<JoinHandle<()>>,
    cancel: CancelHandle,
    model: ModelState,
    messages: Vec<ChatMessage>,
    feature: Feature,
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
}

/// The chat's worker thread and the channels to it.
struct Worker {
    jobs: mpsc::Sender<(u64, ReplyRequest)>,
    events: mpsc::Receiver<WorkerMsg>,
    handle: Option<JoinHandle<()>>,
    cancel: CancelHandle,
    model: ModelState,
}

impl Worker {
    /// Starts the thread, which first builds the responder with `factory`, then answers jobs.
    fn spawn(factory: ResponderFactory, notify: Notify) -> Worker {
        let (job_tx, job_rx) = mpsc::channel::<(u64, ReplyRequest)>();
        let (ev_tx, ev_rx) = mpsc::channel();
        let cancel = CancelHandle::new();
        let flag = cancel.clone();
        let worker = std::thread::Builder::new()
            .name("kostant-chat".into())
            .spawn(move || {
                let send = |m: WorkerMsg| {
                    // A closed channel means the controller is gone; nothing left to tell.
                    let _ = ev_tx.send(m);
                    notify();
                };
                let mut responder = match factory() {
                    Ok((r, summary)) => {
                        send(WorkerMsg::Ready(summary));
                        r
                    }
                    Err(e) => return send(WorkerMsg::LoadFailed(e.to_string())),
                };
                for (job, req) in job_rx {
                    responder.respond(&req, &flag, &mut |ev| send(WorkerMsg::Reply(job, ev)));
                }
            });
        let (handle, model) = match worker {
            Ok(w) => (Some(w), ModelState::Loading),
            Err(e) => (
                None,
                ModelState::Failed(format!("cannot start a thread: {e}")),
            ),
        };
        Worker {
            jobs: job_tx,
            events: ev_rx,
            handle,
            cancel,
            model,
        }
    }
}

impl ChatController {
    /// Starts the worker thread, which first builds the responder with `factory`.
    pub fn new(factory: ResponderFactory, store: Option<SharedStore>, notify: Notify) -> Self {
        let worker = Worker::spawn(factory, notify);
        ChatController {
            jobs: Some(worker.jobs),
            events: worker.events,
            worker: worker.handle,
            cancel: worker.cancel,
            model: worker.model,
            messages: Vec::new(),
            feature: Feature::Chat,
            settings: GenerationSettings::default(),
            running: None,
            next_job: 0,
            last_stats: None,
            store,
            conversation: None,
            switched: None,
            pending_context: None,
            status: None,
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
        let worker = Worker::spawn(factory, notify);
        self.jobs = Some(worker.jobs);
        self.events = worker.events;
        self.worker = worker.handle;
        self.cancel = worker.cancel;
        self.model = worker.model;
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
            .push(ChatMessage::new(Role::User, text, MessageStatus::Done));
        self.start(Save::Append)
    }

    /// Stops the reply being generated at the next token; what was generated stays.
    pub fn stop(&mut self) {
        if self.running.is_some() {
            self.cancel.cancel();
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
            .push(ChatMessage::new(Role::User, text, MessageStatus::Done));
        self.start(if was_saved {
            Save::ReplaceLast
        } else {
            Save::Append
        })
    }

    /// The text of message `index`, for the clipboard.
    pub fn copy_text(&self, index: usize) -> Option<String> {
        self.messages.get(index).map(|m| m.text.clone())
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
            .map(|(role, text)| ChatMessage::new(role, text, MessageStatus::Done))
            .collect();
        if let Some(last) = self.messages.last_mut() {
            last.saved = last.role == Role::Assistant;
        }
        self.conversation = Some(id);
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
        while let Ok(m) = self.events.try_recv() {
            self.apply(m);
            changed = true;
        }
        changed
    }

    /// Blocks until the model has loaded (or failed to). For tests and the terminal.
    pub fn wait_ready(&mut self) -> Result<&ModelSummary, AppError> {
        while self.model == ModelState::Loading {
            let m = self
                .events
                .recv()
                .map_err(|_| AppError::WorkerGone("chat"))?;
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
            let m = self
                .events
                .recv()
                .map_err(|_| AppError::WorkerGone("chat"))?;
            self.apply(m);
        }
        Ok(())
    }

    /// Blocks for the next report from the worker and applies it.
    pub fn wait_event(&mut self) -> Result<(), AppError> {
        let m = self
            .events
            .recv()
            .map_err(|_| AppError::WorkerGone("chat"))?;
        self.apply(m);
        Ok(())
    }

    /// Cancels any reply and joins the worker (closing the window mid-reply ends here).
    pub fn shutdown(&mut self) {
        self.cancel.cancel();
        self.jobs = None;
        if let Some(w) = self.worker.take() {
            // A panicked worker has nothing left to clean up; the app is closing anyway.
            let _ = w.join();
        }
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
        let req = ReplyRequest {
            system: self.feature.system_prompt(),
            feature: self.feature,
            turns,
            settings: self.settings.clone(),
            conversation: self.conversation,
            origin: self.switched.take().unwrap_or_default(),
        };
        let job = self.next_job;
        self.next_job += 1;
        self.cancel.reset();
        let sent = self
            .jobs
            .as_ref()
            .is_some_and(|j| j.send((job, req)).is_ok());
        if !sent {
            self.status = Some("the chat worker has stopped".into());
            return Err(AppError::WorkerGone("chat"));
        }
        self.messages.push(ChatMessage::new(
            Role::Assistant,
            "",
            MessageStatus::Streaming,
        ));
        self.status = None;
        self.running = Some(Running {
            job,
            save,
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
                if reply.status == MessageStatus::Streaming {
                    reply.text.push_str(&t);
                    run.tokens += 1;
                    run.first_token.get_or_insert_with(Instant::now);
                }
            }
            ReplyEvent::Withdrawn { from, to, notice } => {
                replace_range(&mut reply.text, from, to, &notice);
                reply.status = MessageStatus::Withdrawn;
            }
            ReplyEvent::Done(outcome) => {
                match outcome.verdict {
                    _ if reply.status == MessageStatus::Withdrawn => {}
                    Verdict::Answered => reply.status = MessageStatus::Done,
                    Verdict::Stopped {
                        by: StoppedBy::Guard,
                        ..
                    } => reply.status = MessageStatus::Withdrawn,
                    Verdict::Stopped { .. } => reply.status = MessageStatus::Stopped,
                    Verdict::Refused { .. } => reply.status = MessageStatus::Refused,
                }
                // The outcome's text is what the user should end up seeing (the refusal, the
                // notice, the reply); a responder that only withdrew keeps the patched text.
                if !outcome.text.is_empty() || reply.status != MessageStatus::Withdrawn {
                    reply.text = outcome.text;
                }
                reply.verdict = Some(outcome.verdict);
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
                reply.status = MessageStatus::Failed;
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

/// A fresh seed per reply when none is fixed: the clock's nanoseconds are plenty for sampling.
fn time_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kostant_engine::testing::{real_model_path, tiny_model_bytes, TinySpec};

    #[test]
    fn the_memory_plans_count_what_the_guard_holds_beside_the_chat() {
        let default = shared_model(&real_model_path()).unwrap();
        let head = crate::guard_model::builtin_head().unwrap();
        let guard = Guard::new(default.clone(), head).unwrap();
        let own = guard.own_session_plan();
        let mb = |b: usize| b as u64 >> 20;
        assert!(mb(own.weights) > 20 && mb(own.kv) > 5, "{own:?}");
        // The built-in head has a parts head: a long message's session, at the most the guard
        // model can read, counts beside the kept one.
        let longest = default.memory_plan(default.hparams.n_ctx_train);
        assert!(guard.head().parts.is_some());
        assert!(
            own.kv >= longest.kv && own.scratch >= longest.scratch,
            "{own:?}"
        );

        // A model the head does not read (as Gemma 3): the guard reads with the default model
        // on a session of its own, and both count.
        let dir = std::env::temp_dir().join(format!("kostant-plans-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tiny.gguf");
        std::fs::write(&path, tiny_model_bytes(&TinySpec::default()).unwrap()).unwrap();
        let tiny = Model::load(&path).unwrap();
        let other = ModelSummary::of(&tiny, &path, &guard);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(!other.memory_plans.is_empty());
        for p in &other.memory_plans {
            let alone = tiny.memory_plan_with_kv(p.n_ctx, p.kv_type);
            assert_eq!(p.guard, own.total() as u64, "{p:?}");
            assert_eq!(p.total, alone.total() as u64 + own.total() as u64, "{p:?}");
        }

        // The default model: the guard shares its weights, and only its own session adds.
        let same = ModelSummary::of(&default, &real_model_path(), &guard);
        // A long message is at most the chat's context there, and its session counts so.
        for p in &same.memory_plans {
            let alone = default.memory_plan_with_kv(p.n_ctx, p.kv_type);
            let own = guard.own_session_plan_for(p.n_ctx);
            assert_eq!(p.guard, (own.kv + own.scratch) as u64, "{p:?}");
            assert_eq!(p.total, alone.total() as u64 + p.guard, "{p:?}");
        }
        let guard_of = |n: usize| {
            same.memory_plans
                .iter()
                .find(|p| p.n_ctx == n)
                .unwrap()
                .guard
        };
        assert!(guard_of(4096) > guard_of(1024), "{:?}", same.memory_plans);
        // The guard frames a message with its own system prompt and reads the reply on after
        // it, so the session for a 4,096-token message holds more than 4,096 tokens' cache
        // and the reply's room.
        let kept = guard.own_session_plan_for(0);
        let long = guard.own_session_plan_for(4096);
        let room = kostant_safety::reader::REPLY_ROOM;
        assert!(
            long.kv - kept.kv > default.memory_plan(4096 + room).kv,
            "{kept:?} {long:?}"
        );
    }
}
