//! Generation: prefill the prompt, then sample token after token until the model ends its turn,
//! the budget runs out, the context fills or the caller cancels. One loop serves every case:
//! an [`Observer`] (the guard) may read each token's hidden states and hold its text back until
//! judged, and a [`Drafter`] may propose tokens that one batched pass verifies
//! ([`crate::speculative`]). Greedy output is the same token for token with or without one.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::batch::{Batch, Outputs};
use crate::model::Model;
use crate::sampling::{Sampler, SamplingParams};
use crate::session::Session;
use crate::speculative::lookup::PromptLookup;
use crate::speculative::policy::DraftPolicy;
use crate::speculative::verify::{Burst, Verdict};
use crate::speculative::{Drafter, Speculation};
use crate::tokenizer::StreamDecoder;
use crate::{EngineError, Result};

#[derive(Clone, Debug)]
pub struct GenerateRequest {
    /// The whole conversation as tokens, ending where the reply begins.
    pub prompt: Vec<u32>,
    /// At most this many reply tokens. A reply is never empty when this is above 0: its first
    /// token is never an end token.
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// The drafter [`generate`] and [`generate_observed`] use (a drafter passed to
    /// [`generate_with`] takes its place).
    pub speculation: Speculation,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model produced an end-of-turn or end-of-sequence token.
    EndOfTurn,
    MaxTokens,
    ContextFull,
    Cancelled,
    /// An [`Observer`] (the guard) stopped it.
    Observer,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct GenerationStats {
    pub prompt_tokens: usize,
    /// Prompt tokens whose keys and values were already cached from the previous turn.
    pub reused_tokens: usize,
    pub generated_tokens: usize,
    /// From the request to the first generated token.
    pub ttft_ms: f64,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
    /// From the request to the first text passed on; later than `ttft_ms` when an observer
    /// holds text back until it has judged it.
    pub first_shown_ms: f64,
    /// Most tokens an observer held back at once before judging them (0 without one).
    pub max_held_tokens: usize,
    /// Tokens a drafter proposed and a pass verified.
    pub drafted: usize,
    /// Drafted tokens the model agreed with: each saved a pass.
    pub accepted: usize,
    /// Forward passes after the prompt's.
    pub passes: usize,
    /// Time a grammar added to choosing the reply's tokens (0 without one), included in
    /// `decode_ms` (and the first token's in `ttft_ms`).
    pub grammar_ms: f64,
    /// Tokens whose unconstrained choice the grammar refused, so that it masked the vocabulary.
    pub grammar_masks: usize,
}

#[derive(Clone, Debug)]
pub struct Generation {
    pub reply: String,
    pub tokens: Vec<u32>,
    pub stop: StopReason,
    pub stats: GenerationStats,
}

/// Shared flag that stops a generation at the next token boundary.
#[derive(Clone, Debug, Default)]
pub struct CancelHandle(Arc<AtomicBool>);

impl CancelHandle {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
    /// Re-arms the handle for the next generation.
    pub fn reset(&self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// While drafting does not pay, a drafter that is not cheap (a draft model) is still asked for
/// one token every this many passes, so its hit rate and cost stay known.
const PROBE_EVERY: usize = 8;

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn rate(tokens: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        tokens as f64 * 1e3 / ms
    } else {
        0.0
    }
}

/// What an [`Observer`] says of the text it has read so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// Everything read so far has been judged and may be shown.
    Show,
    /// Not judged yet: hold the text back until a later judgement covers it.
    Hold,
    /// Stop the generation: nothing held back is shown.
    Stop,
}

/// Reads a generation's hidden states as the model computes them, judges the text, and may stop
/// it. The guard screens the prompt and the reply this way, riding on the chat model's own pass.
pub trait Observer {
    /// Layers to read, numbered as [`Session::extend_hidden`] numbers them.
    fn taps(&self) -> Vec<usize>;
    /// The prompt tokens that ran (those after the reused prefix) and their states, one
    /// (n, n_embd) matrix per tap; called once, before the first token is sampled.
    fn prompt(&mut self, tokens: &[u32], states: &[Vec<f32>]) -> ControlFlow<()>;
    /// A generated token, the text it completes and its states. Its text (and that of every
    /// token held before it) reaches `on_token` only once a judgement says [`Judgement::Show`]:
    /// nothing is shown that the observer has not judged.
    fn token(&mut self, id: u32, text: &str, states: &[Vec<f32>]) -> Judgement;
    /// The generation ended for a reason of its own (end of turn, budget, context, the user):
    /// judge whatever is still held. Anything but `Show` keeps it from being shown.
    fn finish(&mut self) -> Judgement;
}

/// What rides along a generation.
#[derive(Default)]
pub struct Riders<'a> {
    /// Reads every token before its text is shown, and may stop the generation.
    pub observer: Option<&'a mut dyn Observer>,
    /// Proposes tokens to verify in one pass; `None` means the request's `speculation`.
    pub drafter: Option<&'a mut dyn Drafter>,
    /// Draft this many tokens whenever the drafter has them, instead of as many as pays by
    /// the running estimates (tests, and benchmarks of fixed lengths).
    pub fixed_draft: Option<usize>,
}

/// Runs one generation on `session`, calling `on_token(Some(id), text)` as each token arrives
/// (and `on_token(None, tail)` if bytes of an unfinished character remain at the end).
/// [`generate_with`] without riders.
pub fn generate(
    session: &mut Session,
    req: &GenerateRequest,
    cancel: &CancelHandle,
    on_token: impl FnMut(Option<u32>, &str),
) -> Result<Generation> {
    generate_with(session, req, cancel, Riders::default(), on_token)
}

/// [`generate_with`] with only an [`Observer`] riding along.
pub fn generate_observed(
    session: &mut Session,
    req: &GenerateRequest,
    cancel: &CancelHandle,
    observer: Option<&mut dyn Observer>,
    on_token: impl FnMut(Option<u32>, &str),
) -> Result<Generation> {
    let riders = Riders {
        observer,
        ..Riders::default()
    };
    generate_with(session, req, cancel, riders, on_token)
}

/// The one way to generate. With an observer, each token is run through the model (and read)
/// before its text is passed on, so the last token costs one more step, and a token's text is
/// passed on only once the observer has judged it (it may hold text back until a judgement
/// covers several tokens). With a drafter, a token is run together with the tokens drafted to
/// follow it, each row as a single step would run it; drafts the sampler agrees with need no
/// pass of their own, and the first it does not agree with is rolled back out of the cache. The
/// observer still reads every kept token, in order, before its text is shown. When the
/// generation ends, the session holds exactly what plain decoding would have left in it.
pub fn generate_with(
    session: &mut Session,
    req: &GenerateRequest,
    cancel: &CancelHandle,
    riders: Riders,
    on_token: impl FnMut(Option<u32>, &str),
) -> Result<Generation> {
    let Riders {
        observer,
        drafter,
        fixed_draft,
    } = riders;
    // Shorter borrows, so that they may live as long as the session's own drafter.
    let observer = observer.map(|o| -> &mut dyn Observer { o });
    let given = drafter.map(|d| -> &mut dyn Drafter { d });
    // The session's own drafter goes back into the session however the generation ends.
    let mut attached = session.take_drafter();
    let mut lookup = PromptLookup::default();
    let own: Option<&mut dyn Drafter> = match attached.as_mut() {
        Some(d) => Some(&mut **d),
        None => None,
    };
    let drafter = pick_drafter(given, req.speculation, own, &mut lookup);
    let drafting = Drafting::new(drafter, fixed_draft);
    let result = run(session, req, cancel, observer, drafting, on_token);
    session.set_drafter(attached);
    result
}

/// Prefill, decode, finish.
fn run<'a, F: FnMut(Option<u32>, &str)>(
    session: &'a mut Session,
    req: &'a GenerateRequest,
    cancel: &CancelHandle,
    observer: Option<&'a mut dyn Observer>,
    drafting: Drafting,
    on_token: F,
) -> Result<Generation> {
    let model = session.model().clone();
    let mut run = Run::prefill(session, &model, req, observer, drafting, on_token)?;
    let stop = run.decode(cancel)?;
    Ok(run.finish(stop))
}

/// The one place the drafter is chosen: the caller's, else for [`Speculation::Lookup`] the
/// session's own (a draft model attached to it) or prompt lookup, else none.
fn pick_drafter<'d>(
    given: Option<&'d mut dyn Drafter>,
    speculation: Speculation,
    attached: Option<&'d mut dyn Drafter>,
    lookup: &'d mut PromptLookup,
) -> Option<&'d mut dyn Drafter> {
    match (given, speculation) {
        (Some(d), _) => Some(d),
        (None, Speculation::Lookup) => Some(attached.unwrap_or(lookup)),
        (None, Speculation::Off) => None,
    }
}

/// Every text passed on goes through here, so the first one's time is known.
struct Shown<F> {
    on_token: F,
    start: Instant,
    first_ms: Option<f64>,
}

impl<F: FnMut(Option<u32>, &str)> Shown<F> {
    fn show(&mut self, id: Option<u32>, text: &str) {
        let start = self.start;
        self.first_ms.get_or_insert_with(|| ms_since(start));
        (self.on_token)(id, text)
    }

    /// Passes on the text held back until a judgement covered it, in order.
    fn release(&mut self, held: &mut Vec<(u32, String)>) {
        for (id, text) in held.drain(..) {
            self.show(Some(id), &text);
        }
    }
}

/// The drafter and what decides how much it drafts, with the burst of drafts in flight.
struct Drafting<'d> {
    drafter: Option<&'d mut dyn Drafter>,
    policy: DraftPolicy,
    burst: Burst,
    /// A cheap drafter's guess for the next token while the policy drafts nothing, checked
    /// when that token is sampled.
    shadow: Option<u32>,
    /// Passes with a drafter at hand, for probing a costly drafter now and then.
    passes_run: usize,
    drafts: Vec<u32>,
    /// The token to run and the drafts behind it: one pass's input.
    batch: Vec<u32>,
}

impl<'d> Drafting<'d> {
    fn new(drafter: Option<&'d mut dyn Drafter>, fixed_draft: Option<usize>) -> Self {
        Drafting {
            drafter,
            policy: fixed_draft.map_or_else(DraftPolicy::default, DraftPolicy::fixed),
            burst: Burst::default(),
            shadow: None,
            passes_run: 0,
            drafts: Vec::new(),
            batch: Vec::new(),
        }
    }
}

/// One generation in progress, one method per stage: [`Run::prefill`], then [`Run::decode`]
/// (each token: [`Run::sample`], [`Run::verify`] for the next pass, [`Run::observe`]), then
/// [`Run::finish`].
struct Run<'a, 'd, F> {
    session: &'a mut Session,
    req: &'a GenerateRequest,
    observer: Option<&'a mut dyn Observer>,
    drafting: Drafting<'d>,
    shown: Shown<F>,
    sampler: Sampler,
    stop_ids: Vec<u32>,
    taps: Vec<usize>,
    n_embd: usize,
    out: Outputs,
    prompt_ok: bool,
    decoder: StreamDecoder,
    reply: String,
    tokens: Vec<u32>,
    /// The prompt and the reply so far.
    history: Vec<u32>,
    /// Text the observer has read but not judged yet, with its token ids, in order.
    held: Vec<(u32, String)>,
    /// One token's hidden states, cut out of a verification pass's rows.
    token_states: Vec<Vec<f32>>,
    /// Reply tokens plain decoding would have run by now: the session is cut back to them at
    /// the end (drafts run past them).
    ran: usize,
    stats: GenerationStats,
    start: Instant,
    decode_start: Instant,
}

impl<'a, 'd, F: FnMut(Option<u32>, &str)> Run<'a, 'd, F> {
    /// Runs the prompt (after the prefix the session already holds) and lets the observer
    /// read it.
    fn prefill(
        session: &'a mut Session,
        model: &Model,
        req: &'a GenerateRequest,
        mut observer: Option<&'a mut dyn Observer>,
        drafting: Drafting<'d>,
        on_token: F,
    ) -> Result<Self> {
        let sampler = Sampler::for_model(req.sampling.clone(), model)?;
        let taps = observer.as_ref().map(|o| o.taps()).unwrap_or_default();
        let start = Instant::now();
        let mut out = Outputs::new();
        let reused = session.keep_prefix(&req.prompt)?;
        session.decode(
            &Batch::prompt(&req.prompt[reused..]).with_taps(&taps),
            &mut out,
        )?;
        let prefill_ms = ms_since(start);
        let stats = GenerationStats {
            prompt_tokens: req.prompt.len(),
            reused_tokens: reused,
            prefill_ms,
            prefill_tok_s: rate(req.prompt.len() - reused, prefill_ms),
            ..Default::default()
        };
        let prompt_ok = match observer.as_mut() {
            Some(o) => o.prompt(&req.prompt[reused..], out.states()).is_continue(),
            None => true,
        };
        Ok(Run {
            session,
            req,
            observer,
            drafting,
            shown: Shown {
                on_token,
                start,
                first_ms: None,
            },
            sampler,
            stop_ids: model.tokenizer.end_of_generation_ids(),
            taps,
            n_embd: model.hparams.n_embd,
            out,
            prompt_ok,
            decoder: StreamDecoder::new(&model.tokenizer),
            reply: String::new(),
            tokens: Vec::new(),
            history: req.prompt.clone(),
            held: Vec::new(),
            token_states: Vec::new(),
            ran: 0,
            stats,
            start,
            decode_start: Instant::now(),
        })
    }

    /// Token after token until a reason to stop.
    fn decode(&mut self, cancel: &CancelHandle) -> Result<StopReason> {
        if !self.prompt_ok {
            return Ok(StopReason::Observer);
        }
        let max = self.req.max_tokens;
        loop {
            if cancel.is_cancelled() {
                return Ok(StopReason::Cancelled);
            }
            if self.tokens.len() >= max {
                return Ok(StopReason::MaxTokens);
            }
            let (id, verdict) = self.sample()?;
            if self.stop_ids.contains(&id) {
                return Ok(StopReason::EndOfTurn);
            }
            let full = self.req.prompt.len() + self.ran >= self.session.n_ctx();
            // A token the observer cannot read is never shown.
            if self.observer.is_some() && full {
                return Ok(StopReason::ContextFull);
            }
            self.tokens.push(id);
            self.history.push(id);
            let text = self.decoder.push(id);
            self.reply.push_str(&text);
            if self.observer.is_none() {
                self.shown.show(Some(id), &text);
                if self.tokens.len() >= max {
                    return Ok(StopReason::MaxTokens);
                }
                if full {
                    return Ok(StopReason::ContextFull);
                }
            }
            // The token's logits (and states) come from the last pass if it was drafted
            // there; otherwise it runs now, with a new draft behind it.
            if verdict != Verdict::Accepted {
                self.verify(id, verdict)?;
            }
            self.ran += 1;
            if let Some(stop) = self.observe(id, text) {
                return Ok(stop);
            }
        }
    }

    /// Samples the next token from the last pass's row for it, and settles it against the
    /// draft there: a rejected draft's rows leave the cache.
    fn sample(&mut self) -> Result<(u32, Verdict)> {
        let d = &mut self.drafting;
        let logits = self.out.logits_mut(d.burst.row());
        if self.tokens.is_empty() {
            // A reply says something: an end token first would show the user an empty reply
            // (see docs/eval-report.md for a long pasted text answered so). The likeliest
            // other token starts the reply instead.
            for &s in &self.stop_ids {
                if let Some(l) = logits.get_mut(s as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        // The repetition penalty reads the reply only: it is there to stop the model repeating
        // itself, and the prompt holds the user's own words, which proofread and rewrite must
        // keep (dev splits: scripts/adapters/README.md, "Repetition penalty").
        let so_far = &self.history[self.req.prompt.len()..];
        let id = match d.burst.pending() {
            Some(p) => self.sampler.sample_or_accept(logits, so_far, p),
            None => self.sampler.sample(logits, so_far),
        };
        let verdict = d.burst.settle(id);
        self.stats.accepted += usize::from(verdict == Verdict::Accepted);
        if let Verdict::Rejected { rolled_back } = verdict {
            // Within the last pass, so the session keeps it (even a sliding-window layer's
            // ring holds the rows the last pass's queries saw).
            let keep = self.session.tokens().len() - rolled_back;
            if self.session.truncate(keep) != keep {
                return Err(EngineError::Model(format!(
                    "the kv cache could not roll back to position {keep}"
                )));
            }
            d.policy
                .update(d.burst.accepted() + rolled_back, d.burst.accepted());
        }
        if let Some(guess) = d.shadow.take() {
            d.policy.update(1, usize::from(guess == id));
        }
        if self.tokens.is_empty() {
            self.stats.ttft_ms = ms_since(self.start);
        }
        Ok((id, verdict))
    }

    /// Runs `id` with the tokens drafted to follow it in one pass, whose rows the next tokens
    /// are sampled from (and checked against the drafts).
    fn verify(&mut self, id: u32, verdict: Verdict) -> Result<()> {
        let d = &mut self.drafting;
        if d.burst.drafted() > 0 && verdict == Verdict::Undrafted {
            d.policy.update(d.burst.drafted(), d.burst.accepted());
        }
        self.draft();
        let d = &mut self.drafting;
        d.batch.clear();
        d.batch.push(id);
        d.batch.extend_from_slice(&d.drafts);
        let b = match d.drafts.len() {
            0 => Batch::step(&d.batch[0]),
            _ => Batch::verify(&d.batch),
        };
        let pass = Instant::now();
        self.session
            .decode(&b.with_taps(&self.taps), &mut self.out)?;
        d.policy.timed(d.batch.len(), ms_since(pass));
        self.stats.passes += 1;
        self.stats.drafted += d.drafts.len();
        d.burst.start(&d.drafts);
        Ok(())
    }

    /// Asks the drafter for as many tokens as pay by the policy (into `drafts`), or, while
    /// none pay, for one guess now and then to keep the policy's estimates current.
    fn draft(&mut self) {
        let d = &mut self.drafting;
        d.drafts.clear();
        let Some(drafter) = d.drafter.as_mut() else {
            return;
        };
        // Room for the drafts in the context, and no drafting past the budget.
        let room = self.session.n_ctx() - self.session.tokens().len() - 1;
        let budget = self.req.max_tokens - self.tokens.len();
        let want = d.policy.get().min(room).min(budget);
        d.passes_run += 1;
        if want > 0 {
            let t = Instant::now();
            // A drafter that fails (a draft model out of room, say) costs the reply its
            // speed, not its answer: decoding goes on plainly.
            let failed = drafter.draft(&self.history, want, &mut d.drafts).is_err();
            if failed {
                d.drafts.clear();
                d.drafter = None;
            }
            d.policy.drafted(d.drafts.len(), ms_since(t));
            // Nothing follows an end of turn in this reply.
            let end = d.drafts.iter().position(|t| self.stop_ids.contains(t));
            d.drafts.truncate(end.map_or(want, |e| e + 1).min(want));
            // A draft the grammar refuses can never be kept: verifying it would waste rows.
            let allowed = self.sampler.grammar_prefix(&d.drafts);
            d.drafts.truncate(allowed);
        } else if budget > 0 && (drafter.is_cheap() || d.passes_run.is_multiple_of(PROBE_EVERY)) {
            // Keep the acceptance (and a costly drafter's time) measured while no draft is
            // verified, so the policy notices when drafting starts to pay.
            let t = Instant::now();
            if drafter.draft(&self.history, 1, &mut d.drafts).is_ok() {
                d.shadow = d.drafts.first().copied();
                d.policy.drafted(d.drafts.len(), ms_since(t));
            }
            d.drafts.clear();
        }
    }

    /// Lets the observer read token `id` (its states from the pass that ran it) and shows,
    /// holds or stops as it judges. `Some` is the reason to stop.
    fn observe(&mut self, id: u32, text: String) -> Option<StopReason> {
        let o = self.observer.as_mut()?;
        let states = match self.out.rows() {
            1 => self.out.states(),
            _ => {
                let row = self.drafting.burst.row();
                cut_row(self.out.states(), row, self.n_embd, &mut self.token_states);
                &self.token_states
            }
        };
        match o.token(id, &text, states) {
            Judgement::Stop => return Some(StopReason::Observer),
            Judgement::Hold => {
                self.held.push((id, text));
                self.stats.max_held_tokens = self.stats.max_held_tokens.max(self.held.len());
            }
            Judgement::Show => {
                self.shown.release(&mut self.held);
                self.shown.show(Some(id), &text);
            }
        }
        None
    }

    /// Leaves the session as plain decoding would have, has the observer judge what it still
    /// holds, and passes on the last bytes.
    fn finish(mut self, mut stop: StopReason) -> Generation {
        // Drafts past what plain decoding would have run leave the cache.
        self.session.truncate(self.req.prompt.len() + self.ran);
        if let Some(o) = self.observer.as_mut() {
            // The last held text is judged before anything of it is shown.
            if self.prompt_ok && stop != StopReason::Observer {
                match o.finish() {
                    Judgement::Show => self.shown.release(&mut self.held),
                    Judgement::Hold | Judgement::Stop => stop = StopReason::Observer,
                }
            }
        }
        let tail = self.decoder.flush();
        if !tail.is_empty() {
            self.reply.push_str(&tail);
            // The tail is bytes of tokens already judged: shown when they were.
            if stop != StopReason::Observer {
                self.shown.show(None, &tail);
            }
        }
        let mut stats = self.stats;
        let (grammar_time, masks) = self.sampler.grammar_cost();
        stats.grammar_ms = grammar_time.as_secs_f64() * 1e3;
        stats.grammar_masks = masks;
        let n = self.tokens.len();
        stats.first_shown_ms = self.shown.first_ms.unwrap_or(0.0);
        stats.generated_tokens = n;
        stats.decode_ms = ms_since(self.decode_start);
        // The first token comes from the prefill's logits, so decode speed counts the steps
        // after it.
        stats.decode_tok_s = rate(n.saturating_sub(1), stats.decode_ms);
        if n == 0 {
            stats.ttft_ms = ms_since(self.start);
        }
        Generation {
            reply: self.reply,
            tokens: self.tokens,
            stop,
            stats,
        }
    }
}

/// Row `row` of each tap's (tokens, `width`) states, into `into` (one buffer per tap, reused).
fn cut_row(states: &[Vec<f32>], row: usize, width: usize, into: &mut Vec<Vec<f32>>) {
    into.resize_with(states.len(), Vec::new);
    for (all, one) in states.iter().zip(into.iter_mut()) {
        one.clear();
        one.extend_from_slice(&all[row * width..(row + 1) * width]);
    }
}
