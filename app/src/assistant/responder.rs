//! The guarded responder: the model behind the always-resident guard, replying through the
//! same pipeline as the terminal chat ([`kostant_safety::pipeline::respond`]). The chat's
//! worker thread drives a [`Responder`]; tests script the seam instead.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kostant_engine::{
    ActiveAdapter, CancelHandle, GenerateRequest, KvType, Message, Model, SamplingParams, Session,
    Speculation,
};
use kostant_safety::{pipeline, Guard, Verdict};

use super::choices::Shape;
use super::feature_adapters::{fingerprint_hex, FeatureAdapters};
use super::guard_model::{guard_bytes, guard_for};
use super::model_cache::shared_model;
use super::notices::not_restored_notice;
use super::prefixes::{PrefixCounts, SystemPrefixes};
use super::prompt::fit_prompt;
use super::proofread;
use crate::error::AppError;
use crate::features::Feature;
use crate::history::context::{ContextKeeper, ContextSave};

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
            grammar: None,
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
    /// The shape a grammar holds the reply to ([`super::choices`]); `system` asks for it.
    pub shape: Option<Shape>,
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
    /// The passages an "Ask documents" reply stands on, sent just before its `Done`
    /// ([`super::ask::AskDocuments`]); a reply refused or withdrawn by the guard has none.
    Sources(Vec<super::ask::Source>),
    /// A proofread reply's changes to the user's text, sent just before its `Done`
    /// ([`super::proofread`]); a reply the guard stopped has none.
    Changes(super::proofread::Proofread),
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

    /// The guard, for what is read before a reply is asked for (the passages of an "Ask
    /// documents" question, [`super::ask::AskDocuments`]); `None` for a responder without one.
    fn screening_guard(&mut self) -> Option<&mut Guard> {
        None
    }
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
    /// guard holds beside the chat ([`super::guard_model::guard_bytes`]): the Settings screen
    /// picks the largest that fits the budget.
    pub memory_plans: Vec<ContextPlan>,
    pub n_ctx_train: usize,
    /// [`super::feature_adapters::fingerprint_hex`]: which shipped adapters apply to it.
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
        let guard = guard_for(&model, path)?;
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
    pub fn system_prompts(&self) -> PrefixCounts {
        self.prefixes.counts()
    }

    /// The guard, to tune its thresholds (a test forces a withdrawal with an output threshold
    /// of 0).
    pub fn guard_mut(&mut self) -> &mut Guard {
        &mut self.guard
    }

    /// One reply: the session for the request's settings, the feature's adapter and the
    /// conversation's context put in place, the prompt fitted and its system prompt read (or
    /// restored), then the guarded pipeline. Every failure leaves the session in `self`.
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
        if req.feature == Feature::Proofread {
            return self.proofread(req, &user, adapter, cancel, emit);
        }
        let mut session = self.take_session(req)?;
        let prepared = self.prepare(&mut session, req, adapter);
        let (prompt, notice) = match prepared {
            Ok(p) => p,
            Err(e) => {
                self.session = Some(session);
                return Err(e);
            }
        };
        let reply = self.generate(&mut session, req, prompt, &user, cancel, emit);
        let reply = match reply {
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
        let stats = reply.generation.as_ref().map(|g| ReplyStats {
            prompt_tokens: g.stats.prompt_tokens,
            reused_tokens: g.stats.reused_tokens,
            generated_tokens: g.stats.generated_tokens,
            ttft_ms: g.stats.ttft_ms,
            decode_tok_s: g.stats.decode_tok_s,
            adapter,
        });
        emit(ReplyEvent::Done(ReplyOutcome {
            text: reply.text,
            verdict: reply.verdict,
            stats,
            context: Some(context),
            notice,
        }));
        Ok(())
    }

    /// A proofread reply ([`proofread::respond`]): each sentence on its own, so the session
    /// keeps no conversation context afterwards.
    fn proofread(
        &mut self,
        req: &ReplyRequest,
        user: &str,
        adapter: Option<ActiveAdapter>,
        cancel: &CancelHandle,
        emit: &mut dyn FnMut(ReplyEvent),
    ) -> Result<(), AppError> {
        let mut session = self.take_session(req)?;
        self.keeper.forget();
        let result = session
            .set_adapter(adapter)
            .map_err(AppError::from)
            .and_then(|_| {
                proofread::respond(
                    &mut session,
                    &mut self.guard,
                    &req.system,
                    &req.settings.sampling(),
                    user,
                    cancel,
                )
            });
        let adapter = session.adapter().map(|a| a.adapter.name().to_string());
        self.session = Some(session);
        let done = result?;
        let stats = done.reply.generation.as_ref().map(|g| ReplyStats {
            prompt_tokens: g.stats.prompt_tokens,
            reused_tokens: g.stats.reused_tokens,
            generated_tokens: g.stats.generated_tokens,
            ttft_ms: g.stats.ttft_ms,
            decode_tok_s: g.stats.decode_tok_s,
            adapter,
        });
        emit(ReplyEvent::Token(done.reply.text.clone()));
        if let Some(p) = done.proofread {
            emit(ReplyEvent::Changes(p));
        }
        emit(ReplyEvent::Done(ReplyOutcome {
            text: done.reply.text,
            verdict: done.reply.verdict,
            stats,
            context: None,
            notice: None,
        }));
        Ok(())
    }

    /// The kept session when it has the request's context size and cache type, else a new one
    /// (Settings changed; what the keeper saved belongs to the old one).
    fn take_session(&mut self, req: &ReplyRequest) -> Result<Session, AppError> {
        let n_ctx = req.settings.n_ctx.min(self.model.hparams.n_ctx_train);
        match self.session.take() {
            Some(s) if s.n_ctx() == n_ctx && s.kv_type() == req.settings.kv_type => Ok(s),
            other => match Session::with_kv_type(self.model.clone(), n_ctx, req.settings.kv_type) {
                Ok(s) => {
                    self.keeper.forget();
                    Ok(s)
                }
                Err(e) => {
                    self.session = other;
                    Err(e.into())
                }
            },
        }
    }

    /// Puts the feature's adapter on, restores the conversation's saved context when another
    /// was on, fits the prompt and reads (or restores) its system prompt. Returns the prompt
    /// and, when a saved context could not be used, why.
    fn prepare(
        &mut self,
        session: &mut Session,
        req: &ReplyRequest,
        adapter: Option<ActiveAdapter>,
    ) -> Result<(Vec<u32>, Option<String>), AppError> {
        // The feature's adapter goes on first: the session forgets rows computed under
        // another, and a saved context is restored only under the adapter it was saved with.
        let before = session.adapter().map(ActiveAdapter::id);
        session.set_adapter(adapter)?;
        if session.adapter().map(ActiveAdapter::id) != before {
            self.keeper.forget();
        }
        let mut notice = None;
        if let ContextOrigin::Switched(saved) = &req.origin {
            // The cache may keep its tokens: the next prompt reuses only the prefix it shares
            // with them (the system prompt), never another conversation's turns.
            self.keeper.forget();
            if let (Some(saved), Some(id)) = (saved, req.conversation) {
                if let Err(e) = self.keeper.restore_saved(id, saved, session) {
                    notice = Some(not_restored_notice(&saved.header, session, &e));
                }
            }
        }
        let (prompt, _dropped) = fit_prompt(
            &self.model,
            Some(&req.system),
            &req.turns,
            req.settings.max_tokens,
            session.n_ctx(),
        )?;
        match self.prefixes.prepare(session, &req.system, &prompt) {
            Ok(None) => {}
            // The session now holds only the system prompt: what was saved of it is gone.
            Ok(Some(_)) => self.keeper.forget(),
            Err(e) => {
                self.keeper.forget();
                session.reset();
                return Err(e);
            }
        }
        Ok((prompt, notice))
    }

    /// The reply through [`pipeline::respond`], its tokens and withdrawals passed to `emit`.
    fn generate(
        &mut self,
        session: &mut Session,
        req: &ReplyRequest,
        prompt: Vec<u32>,
        user: &str,
        cancel: &CancelHandle,
        emit: &mut dyn FnMut(ReplyEvent),
    ) -> Result<pipeline::Reply, kostant_safety::SafetyError> {
        let budget = req
            .settings
            .max_tokens
            .min(session.n_ctx().saturating_sub(prompt.len()))
            .max(1);
        let mut sampling = req.settings.sampling();
        sampling.grammar = req.shape.map(Shape::grammar).transpose()?;
        let gen = GenerateRequest {
            prompt,
            max_tokens: budget,
            sampling,
            speculation: Speculation::default(),
        };
        pipeline::respond(
            session,
            &mut self.guard,
            &gen,
            user,
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
        )
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

    fn screening_guard(&mut self) -> Option<&mut Guard> {
        Some(&mut self.guard)
    }
}

impl ModelSummary {
    /// What Settings shows of `model` (mapped from `path`), chatting under `guard`.
    fn of(model: &Arc<Model>, path: &Path, guard: &Guard) -> ModelSummary {
        let hp = &model.hparams;
        let guard_at = |n_ctx| guard_bytes(guard, model, n_ctx);
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
            fingerprint: fingerprint_hex(model),
        }
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
        let head = super::super::guard_model::builtin_head().unwrap();
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
