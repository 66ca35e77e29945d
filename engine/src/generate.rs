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
pub fn generate(
    session: &mut Session,
    req: &GenerateRequest,
    cancel: &CancelHandle,
    on_token: impl FnMut(Option<u32>, &str),
) -> Result<Generation> {
    generate_with(session, req, cancel, Riders::default(), on_token)
}

/// [`generate`] with an [`Observer`] reading along: see [`generate_with`].
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

/// The generation loop. With an observer, each token is run through the model (and read)
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
    // The session's own drafter, when one is attached, drafts in lookup's place; it goes back
    // into the session however the generation ends.
    let mut attached = session.take_drafter();
    let own: Option<&mut dyn Drafter> = match attached.as_mut() {
        Some(d) => Some(&mut **d),
        None => None,
    };
    let result = generate_riding(session, req, cancel, riders, own, on_token);
    session.set_drafter(attached);
    result
}

fn generate_riding(
    session: &mut Session,
    req: &GenerateRequest,
    cancel: &CancelHandle,
    riders: Riders,
    attached: Option<&mut dyn Drafter>,
    mut on_token: impl FnMut(Option<u32>, &str),
) -> Result<Generation> {
    let Riders {
        mut observer,
        drafter,
        fixed_draft,
    } = riders;
    let mut lookup = PromptLookup::default();
    let mut drafter: Option<&mut dyn Drafter> = match (drafter, req.speculation) {
        (Some(d), _) => Some(d),
        (None, Speculation::Lookup) => Some(attached.unwrap_or(&mut lookup)),
        (None, Speculation::Off) => None,
    };
    let mut sampler = Sampler::new(req.sampling.clone())?;
    let model = session.model().clone();
    let tok = &model.tokenizer;
    let stop_ids = tok.end_of_generation_ids();
    let taps = observer.as_ref().map(|o| o.taps()).unwrap_or_default();

    let start = Instant::now();
    let mut out = Outputs::new();
    let reused = session.keep_prefix(&req.prompt)?;
    session.decode(
        &Batch::prompt(&req.prompt[reused..]).with_taps(&taps),
        &mut out,
    )?;
    let prefill_ms = ms_since(start);
    let mut stats = GenerationStats {
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

    // Every text passed on goes through here, so the first one's time is known.
    let mut first_shown: Option<f64> = None;
    let mut on_token = |id: Option<u32>, text: &str| {
        first_shown.get_or_insert_with(|| ms_since(start));
        on_token(id, text)
    };
    let mut decoder = StreamDecoder::new(tok);
    let mut reply = String::new();
    let mut tokens = Vec::new();
    let mut history = req.prompt.clone();
    // Text the observer has read but not judged yet, with its token ids, in order.
    let mut held: Vec<(u32, String)> = Vec::new();
    let mut burst = Burst::default();
    let mut policy = fixed_draft.map_or_else(DraftPolicy::default, DraftPolicy::fixed);
    // A cheap drafter's guess for the next token while the policy drafts nothing, checked when
    // that token is sampled.
    let mut shadow: Option<u32> = None;
    // Passes with a drafter at hand, for probing a costly drafter now and then.
    let mut passes_run = 0usize;
    let mut drafts = Vec::new();
    let mut batch = Vec::new();
    // One token's hidden states, cut out of a verification pass's rows.
    let mut token_states: Vec<Vec<f32>> = Vec::new();
    // Reply tokens plain decoding would have run by now: the session is cut back to them at
    // the end (drafts run past them).
    let mut ran = 0usize;
    let decode_start = Instant::now();
    let stop = loop {
        if !prompt_ok {
            break StopReason::Observer;
        }
        if cancel.is_cancelled() {
            break StopReason::Cancelled;
        }
        if tokens.len() >= req.max_tokens {
            break StopReason::MaxTokens;
        }
        let logits = out.logits_mut(burst.row());
        if tokens.is_empty() {
            // A reply says something: an end token first would show the user an empty reply
            // (see docs/eval-report.md for a long pasted text answered so). The likeliest
            // other token starts the reply instead.
            for &s in &stop_ids {
                if let Some(l) = logits.get_mut(s as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        // The repetition penalty reads the reply only: it is there to stop the model repeating
        // itself, and the prompt holds the user's own words, which proofread and rewrite must
        // keep (dev splits: scripts/adapters/README.md, "Repetition penalty").
        let so_far = &history[req.prompt.len()..];
        let id = match burst.pending() {
            Some(d) => sampler.sample_or_accept(logits, so_far, d),
            None => sampler.sample(logits, so_far),
        };
        let verdict = burst.settle(id);
        stats.accepted += usize::from(verdict == Verdict::Accepted);
        if let Verdict::Rejected { rolled_back } = verdict {
            // Within the last pass, so the session keeps it (even a sliding-window layer's
            // ring holds the rows the last pass's queries saw).
            let keep = session.tokens().len() - rolled_back;
            if session.truncate(keep) != keep {
                return Err(EngineError::Model(format!(
                    "the kv cache could not roll back to position {keep}"
                )));
            }
            policy.update(burst.accepted() + rolled_back, burst.accepted());
        }
        if let Some(guess) = shadow.take() {
            policy.update(1, usize::from(guess == id));
        }
        if tokens.is_empty() {
            stats.ttft_ms = ms_since(start);
        }
        if stop_ids.contains(&id) {
            break StopReason::EndOfTurn;
        }
        let full = req.prompt.len() + ran >= session.n_ctx();
        // A token the observer cannot read is never shown.
        if observer.is_some() && full {
            break StopReason::ContextFull;
        }
        tokens.push(id);
        history.push(id);
        let text = decoder.push(id);
        reply.push_str(&text);
        if observer.is_none() {
            on_token(Some(id), &text);
            if tokens.len() >= req.max_tokens {
                break StopReason::MaxTokens;
            }
            if full {
                break StopReason::ContextFull;
            }
        }
        // The token's logits (and states) come from the last pass if it was drafted there;
        // otherwise it runs now, with a new draft behind it.
        if verdict != Verdict::Accepted {
            if burst.drafted() > 0 && verdict == Verdict::Undrafted {
                policy.update(burst.drafted(), burst.accepted());
            }
            drafts.clear();
            if let Some(d) = drafter.as_mut() {
                // Room for the drafts in the context, and no drafting past the budget.
                let room = session.n_ctx() - session.tokens().len() - 1;
                let budget = req.max_tokens - tokens.len();
                let want = policy.get().min(room).min(budget);
                passes_run += 1;
                // A drafter that fails (a draft model out of room, say) costs the reply its
                // speed, not its answer: decoding goes on plainly.
                if want > 0 {
                    let t = Instant::now();
                    if d.draft(&history, want, &mut drafts).is_err() {
                        drafts.clear();
                        drafter = None;
                    }
                    policy.drafted(drafts.len(), ms_since(t));
                    // Nothing follows an end of turn in this reply.
                    let end = drafts.iter().position(|t| stop_ids.contains(t));
                    drafts.truncate(end.map_or(want, |e| e + 1).min(want));
                } else if budget > 0 && (d.is_cheap() || passes_run.is_multiple_of(PROBE_EVERY)) {
                    // Keep the acceptance (and a costly drafter's time) measured while no
                    // draft is verified, so the policy notices when drafting starts to pay.
                    let t = Instant::now();
                    if d.draft(&history, 1, &mut drafts).is_ok() {
                        shadow = drafts.first().copied();
                        policy.drafted(drafts.len(), ms_since(t));
                    }
                    drafts.clear();
                }
            }
            batch.clear();
            batch.push(id);
            batch.extend_from_slice(&drafts);
            let b = match drafts.len() {
                0 => Batch::step(&batch[0]),
                _ => Batch::verify(&batch),
            };
            let pass = Instant::now();
            session.decode(&b.with_taps(&taps), &mut out)?;
            policy.timed(batch.len(), ms_since(pass));
            stats.passes += 1;
            stats.drafted += drafts.len();
            burst.start(&drafts);
        }
        ran += 1;
        let Some(o) = observer.as_mut() else {
            continue;
        };
        let states = match out.rows() {
            1 => out.states(),
            _ => {
                cut_row(
                    out.states(),
                    burst.row(),
                    model.hparams.n_embd,
                    &mut token_states,
                );
                &token_states
            }
        };
        match o.token(id, &text, states) {
            Judgement::Stop => break StopReason::Observer,
            Judgement::Hold => {
                held.push((id, text));
                stats.max_held_tokens = stats.max_held_tokens.max(held.len());
            }
            Judgement::Show => {
                release(&mut held, &mut on_token);
                on_token(Some(id), &text);
            }
        }
    };
    // Drafts past what plain decoding would have run leave the cache.
    session.truncate(req.prompt.len() + ran);
    let mut stop = stop;
    if let Some(o) = observer.as_mut() {
        // The last held text is judged before anything of it is shown.
        if prompt_ok && stop != StopReason::Observer {
            match o.finish() {
                Judgement::Show => release(&mut held, &mut on_token),
                Judgement::Hold | Judgement::Stop => stop = StopReason::Observer,
            }
        }
    }
    let tail = decoder.flush();
    if !tail.is_empty() {
        reply.push_str(&tail);
        // The tail is bytes of tokens already judged: shown when they were.
        if stop != StopReason::Observer {
            on_token(None, &tail);
        }
    }
    stats.first_shown_ms = first_shown.unwrap_or(0.0);
    stats.generated_tokens = tokens.len();
    stats.decode_ms = ms_since(decode_start);
    // The first token comes from the prefill's logits, so decode speed counts the steps after it.
    stats.decode_tok_s = rate(tokens.len().saturating_sub(1), stats.decode_ms);
    if tokens.is_empty() {
        stats.ttft_ms = ms_since(start);
    }
    Ok(Generation {
        reply,
        tokens,
        stop,
        stats,
    })
}

/// Row `row` of each tap's (tokens, `width`) states, into `into` (one buffer per tap, reused).
fn cut_row(states: &[Vec<f32>], row: usize, width: usize, into: &mut Vec<Vec<f32>>) {
    into.resize_with(states.len(), Vec::new);
    for (all, one) in states.iter().zip(into.iter_mut()) {
        one.clear();
        one.extend_from_slice(&all[row * width..(row + 1) * width]);
    }
}

/// Passes on the text held back until a judgement covered it, in order.
fn release(held: &mut Vec<(u32, String)>, on_token: &mut impl FnMut(Option<u32>, &str)) {
    for (id, text) in held.drain(..) {
        on_token(Some(id), &text);
    }
}
