//! Generation: prefill the prompt, then sample token after token until the model ends its turn,
//! the budget runs out, the context fills or the caller cancels.
//!
//! [`generate`] is the synchronous core and reports each token to a callback. [`spawn`] runs it
//! on its own thread and streams [`Event`]s over a tokio channel, with a [`CancelHandle`]:
//! the API the terminal chat and the UI both use.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tokio::sync::mpsc;

use crate::sampling::{Sampler, SamplingParams};
use crate::session::Session;
use crate::tokenizer::StreamDecoder;
use crate::Result;

#[derive(Clone, Debug)]
pub struct GenerateRequest {
    /// The whole conversation as tokens, ending where the reply begins.
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
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
}

#[derive(Clone, Debug)]
pub struct Generation {
    pub reply: String,
    pub tokens: Vec<u32>,
    pub stop: StopReason,
    pub stats: GenerationStats,
}

#[derive(Clone, Debug)]
pub enum Event {
    /// Text as it is generated: one token and the text it completes (empty mid-way through a
    /// multi-byte character), or, with `id: None`, the last held-back bytes at the end.
    Token {
        id: Option<u32>,
        text: String,
    },
    Done(Generation),
    Error(String),
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

/// Runs one generation on `session`, calling `on_token(Some(id), text)` as each token arrives
/// (and `on_token(None, tail)` if bytes of an unfinished character remain at the end).
pub fn generate(
    session: &mut Session,
    req: &GenerateRequest,
    cancel: &CancelHandle,
    on_token: impl FnMut(Option<u32>, &str),
) -> Result<Generation> {
    generate_observed(session, req, cancel, None, on_token)
}

/// [`generate`] with an [`Observer`] reading along. With one, each token is run through the
/// model (and read) before its text is passed on, so the last token costs one more step, and a
/// token's text is passed on only once the observer has judged it (it may hold text back until
/// a judgement covers several tokens).
pub fn generate_observed(
    session: &mut Session,
    req: &GenerateRequest,
    cancel: &CancelHandle,
    mut observer: Option<&mut dyn Observer>,
    mut on_token: impl FnMut(Option<u32>, &str),
) -> Result<Generation> {
    let mut sampler = Sampler::new(req.sampling.clone())?;
    let model = session.model().clone();
    let tok = &model.tokenizer;
    let stop_ids = tok.end_of_generation_ids();
    let taps = observer.as_ref().map(|o| o.taps()).unwrap_or_default();

    let start = Instant::now();
    let (mut logits, reused, mut states) = session.prefill_tapped(&req.prompt, &taps)?;
    let prefill_ms = ms_since(start);
    let mut stats = GenerationStats {
        prompt_tokens: req.prompt.len(),
        reused_tokens: reused,
        prefill_ms,
        prefill_tok_s: rate(req.prompt.len() - reused, prefill_ms),
        ..Default::default()
    };
    let prompt_ok = match observer.as_mut() {
        Some(o) => o.prompt(&req.prompt[reused..], &states).is_continue(),
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
        let id = sampler.sample(&mut logits, &history);
        if tokens.is_empty() {
            stats.ttft_ms = ms_since(start);
        }
        if stop_ids.contains(&id) {
            break StopReason::EndOfTurn;
        }
        let full = session.tokens().len() >= session.n_ctx();
        if let Some(o) = observer.as_mut() {
            // A token the observer cannot read is never shown.
            if full {
                break StopReason::ContextFull;
            }
            tokens.push(id);
            history.push(id);
            let text = decoder.push(id);
            session.step_tapped_into(id, &taps, &mut logits, &mut states)?;
            reply.push_str(&text);
            match o.token(id, &text, &states) {
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
            continue;
        }
        tokens.push(id);
        history.push(id);
        let text = decoder.push(id);
        reply.push_str(&text);
        on_token(Some(id), &text);
        if tokens.len() >= req.max_tokens {
            break StopReason::MaxTokens;
        }
        if full {
            break StopReason::ContextFull;
        }
        session.step_into(id, &mut logits)?;
    };
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

/// Passes on the text held back until a judgement covered it, in order.
fn release(held: &mut Vec<(u32, String)>, on_token: &mut impl FnMut(Option<u32>, &str)) {
    for (id, text) in held.drain(..) {
        on_token(Some(id), &text);
    }
}

/// A generation running on its own thread.
pub struct Running {
    pub events: mpsc::UnboundedReceiver<Event>,
    pub cancel: CancelHandle,
    /// Gives the session back (with the reply in its cache) once generation ends.
    pub join: std::thread::JoinHandle<Session>,
}

/// Starts `generate` on a new thread; events arrive on `events` in order, ending with exactly
/// one `Done` or `Error`.
pub fn spawn(mut session: Session, req: GenerateRequest, cancel: CancelHandle) -> Running {
    let (tx, rx) = mpsc::unbounded_channel();
    let flag = cancel.clone();
    let join = std::thread::spawn(move || {
        let result = generate(&mut session, &req, &flag, |id, text| {
            // A closed receiver means nobody is listening any more: stop generating.
            if tx
                .send(Event::Token {
                    id,
                    text: text.to_string(),
                })
                .is_err()
            {
                flag.cancel();
            }
        });
        let last = match result {
            Ok(g) => Event::Done(g),
            Err(e) => Event::Error(e.to_string()),
        };
        let _ = tx.send(last);
        session
    });
    Running {
        events: rx,
        cancel,
        join,
    }
}
