//! How the guard reads a conversation: as the chat model sees it, rendered with the model's
//! own chat template, a system prompt first. The features are, for each tapped layer, the mean
//! hidden state from the start of the user's message to the latest token, and the latest
//! token's state. Both update in place as tokens arrive, so a streamed reply is never re-read.
//!
//! The same features come from two places. When the guard model is the chat model, the guard
//! rides on the chat's own forward pass ([`Features`] fed by an engine `Observer`) and costs
//! almost nothing. Otherwise the [`Reader`] runs the guard model on its own session over the
//! same rendered conversation.

use std::ops::Range;
use std::sync::Arc;

use kostant_engine::{Batch, Message, Model, Outputs, Role, Session};

use crate::normalize::normalize;
use crate::{Result, SafetyError};

/// Which layers are read and how the guard frames text when it reads on its own; stored with
/// the trained head so a head is always read the way it was trained.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FeatureSpec {
    /// Layer taps as `Session::extend_hidden` numbers them (n_layer = after the final norm).
    pub taps: Vec<usize>,
    /// The system prompt of the conversation the guard reads when it reads on its own (riding
    /// on the chat, it sees the chat's).
    pub system_prompt: String,
    /// Most tokens of one message the guard reads in one turn on its own; a longer message is
    /// read in overlapping windows of this many tokens.
    pub window: usize,
}

impl FeatureSpec {
    pub fn dim(&self, n_embd: usize) -> usize {
        2 * self.taps.len() * n_embd
    }
}

/// Running features over a token stream: per tap, the sum of the states read since the start
/// of the user's message and the latest state.
#[derive(Clone, Debug)]
pub struct Features {
    n_embd: usize,
    /// f64: long replies add many terms.
    sums: Vec<Vec<f64>>,
    last: Vec<Vec<f32>>,
    count: usize,
}

impl Features {
    pub fn new(taps: usize, n_embd: usize) -> Features {
        Features {
            n_embd,
            sums: vec![vec![0.0; n_embd]; taps],
            last: vec![vec![0.0; n_embd]; taps],
            count: 0,
        }
    }

    pub fn clear(&mut self) {
        self.sums.iter_mut().for_each(|s| s.fill(0.0));
        self.count = 0;
    }

    /// Tokens read.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Adds rows `from..` of each tap's (n, n_embd) state matrix.
    pub fn add(&mut self, states: &[Vec<f32>], from: usize) {
        self.add_rows(states, from..usize::MAX);
    }

    /// Adds rows `rows` (clipped to the matrix) of each tap's (n, n_embd) state matrix.
    pub fn add_rows(&mut self, states: &[Vec<f32>], rows: Range<usize>) {
        let e = self.n_embd;
        let mut added = 0;
        for ((state, sum), last) in states.iter().zip(&mut self.sums).zip(&mut self.last) {
            let n = state.len() / e;
            let (begin, end) = (rows.start.min(n), rows.end.min(n));
            added = end.saturating_sub(begin);
            for row in state[begin * e..end.max(begin) * e].chunks_exact(e) {
                for (s, &v) in sum.iter_mut().zip(row) {
                    *s += v as f64;
                }
            }
            if added > 0 {
                last.copy_from_slice(&state[(end - 1) * e..end * e]);
            }
        }
        self.count += added;
    }

    /// Per tap: [mean, latest]. None before any token.
    pub fn vector(&self) -> Option<Vec<f32>> {
        if self.count == 0 {
            return None;
        }
        let mut f = Vec::with_capacity(2 * self.sums.len() * self.n_embd);
        for (sum, last) in self.sums.iter().zip(&self.last) {
            f.extend(sum.iter().map(|&s| (s / self.count as f64) as f32));
            f.extend_from_slice(last);
        }
        Some(f)
    }
}

/// Tokens each window shares with the one before it: half the window, so any phrase of up to
/// half a window (a request buried in pasted text, say) lies whole inside one window and is
/// never read only cut in two or diluted by the text around it.
pub fn window_overlap(window: usize) -> usize {
    window / 2
}

/// The windows a message of tokens `begin..end` is read in: runs of at most `window` tokens,
/// each starting [`window_overlap`] tokens before the previous one ends; one run when it fits.
pub fn window_ranges(begin: usize, end: usize, window: usize) -> Vec<Range<usize>> {
    let step = window.saturating_sub(window_overlap(window)).max(1);
    let mut out = Vec::new();
    let mut at = begin;
    loop {
        let stop = at.saturating_add(window).min(end);
        out.push(at..stop);
        if stop >= end {
            return out;
        }
        at += step;
    }
}

/// `message` as the guard reads it (normalized, trimmed), the user's turn after
/// `system_prompt` in the model's chat template with the assistant's turn opened, and the index
/// of the message's first token: how the riding screen sees a one-message conversation.
pub fn frame_message(
    model: &Model,
    system_prompt: &str,
    message: &str,
) -> Result<(Vec<u32>, usize)> {
    let message = normalize(message);
    let conversation = [
        Message::new(Role::System, system_prompt),
        Message::new(Role::User, message.trim()),
    ];
    let prompt = model
        .chat_template
        .render(&model.tokenizer, &conversation, true)?
        .tokens;
    let start = message_start(model, &prompt, message.trim())?
        .ok_or_else(|| SafetyError::Head("the template dropped the message".into()))?;
    Ok((prompt, start))
}

/// Where the user's message starts in a rendered prompt: the last place its content's tokens
/// occur (the template tokenizes each message's content on its own, so they occur verbatim).
/// An empty message starts at the prompt's last token.
pub fn message_start(model: &Model, prompt: &[u32], message: &str) -> Result<Option<usize>> {
    let content = model.tokenizer.encode(message.trim(), false)?;
    if content.is_empty() {
        return Ok(prompt.len().checked_sub(1));
    }
    Ok(prompt
        .windows(content.len())
        .rposition(|w| w == content.as_slice()))
}

/// The guard model reading on its own session: a conversation with the spec's system prompt
/// (kept in the cache), then one user message, then, optionally, the start of a reply.
pub struct Reader {
    model: Arc<Model>,
    /// Made at the first read: riding on the chat's pass, the guard never needs its own cache.
    session: Option<Session>,
    /// The context the session is made with.
    n_ctx: usize,
    spec: FeatureSpec,
    /// Tokens of the system-only prefix, kept in the cache between messages.
    prefix: Vec<u32>,
    features: Features,
    /// The cache length and features at the end of the message (before any reply token),
    /// to go back to when a long reply fills the cache.
    message_end: Option<(usize, Features)>,
    /// A message longer than a window, read whole on a session sized to it
    /// ([`Reader::read_whole`]); while it is the message last read, its reply is read on it.
    whole: Option<Session>,
}

/// Room for reply tokens after a full window of message, or after a long message read whole.
pub const REPLY_ROOM: usize = 256;

impl Reader {
    pub fn new(model: Arc<Model>, spec: FeatureSpec) -> Result<Reader> {
        let n_layer = model.hparams.n_layer;
        if spec.taps.is_empty() || spec.taps.iter().any(|&t| t > n_layer) {
            return Err(SafetyError::Head(format!(
                "layer taps {:?} do not fit a model with {n_layer} layers",
                spec.taps
            )));
        }
        if spec.window < 16 {
            return Err(SafetyError::Head(format!(
                "window of {} tokens is too small",
                spec.window
            )));
        }
        let system = [Message::new(Role::System, spec.system_prompt.clone())];
        let prefix = model
            .chat_template
            .render(&model.tokenizer, &system, false)?
            .tokens;
        // The template's own tokens around a message are a few dozen at most.
        let n_ctx = prefix.len() + spec.window + 64 + REPLY_ROOM;
        if model.hparams.n_ctx_train < n_ctx {
            return Err(SafetyError::Head(format!(
                "the guard model's context ({}) cannot hold a {}-token window",
                model.hparams.n_ctx_train, spec.window
            )));
        }
        let features = Features::new(spec.taps.len(), model.hparams.n_embd);
        Ok(Reader {
            model,
            session: None,
            n_ctx,
            spec,
            prefix,
            features,
            message_end: None,
            whole: None,
        })
    }

    pub fn spec(&self) -> &FeatureSpec {
        &self.spec
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// The context the reader's own session is made with: the system prefix, a window of
    /// message, the template's tokens and room for a reply.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Bytes of the guard's own KV caches (the kept one and a long message's, while held).
    pub fn kv_bytes(&self) -> usize {
        let kept = self.session.as_ref().map_or(0, Session::kv_bytes);
        kept + self.whole.as_ref().map_or(0, Session::kv_bytes)
    }

    /// Whether `message` is read in one window (its tokens, trimmed, fit [`FeatureSpec::window`]).
    pub fn fits_one_window(&self, message: &str) -> Result<bool> {
        let ids = self.model().tokenizer.encode(message.trim(), false)?;
        Ok(ids.len() <= self.spec.window)
    }

    /// Splits a message into the windows the reader takes ([`window_ranges`]), as text.
    pub fn windows(&self, message: &str) -> Result<Vec<String>> {
        let tok = &self.model().tokenizer;
        let ids = tok.encode(message.trim(), false)?;
        if ids.len() <= self.spec.window {
            return Ok(vec![message.trim().to_string()]);
        }
        Ok(window_ranges(0, ids.len(), self.spec.window)
            .into_iter()
            .map(|r| tok.decode(&ids[r]))
            .collect())
    }

    /// Reads `message` (at most one window of it; see [`Reader::windows`]) as the user's turn,
    /// up to where the assistant's reply would begin. Returns the tokens read from the start
    /// of the message on.
    pub fn read_message(&mut self, message: &str) -> Result<usize> {
        let model = self.model().clone();
        let conversation = [
            Message::new(Role::System, self.spec.system_prompt.clone()),
            Message::new(Role::User, message),
        ];
        let tokens = model
            .chat_template
            .render(&model.tokenizer, &conversation, true)?
            .tokens;
        let start = message_start(&model, &tokens, message)?
            .ok_or_else(|| SafetyError::Head("the template dropped the message".into()))?;
        if tokens.len() + 1 > self.n_ctx {
            return Err(SafetyError::Head(format!(
                "a message of {} tokens is longer than the guard's window of {}",
                tokens.len() - self.prefix.len(),
                self.spec.window
            )));
        }
        // A long message read before is done with: its reply was read.
        self.whole = None;
        // Keep the cached system prompt; everything after it runs again.
        let keep = if tokens.starts_with(&self.prefix) {
            self.prefix.len().min(start)
        } else {
            0
        };
        let session = session(&mut self.session, &self.model, self.n_ctx)?;
        session.truncate(keep);
        if session.tokens() != &tokens[..keep] {
            session.reset();
        }
        let from = session.tokens().len();
        let states = hidden_states(session, &tokens[from..], &self.spec.taps)?;
        let end = session.tokens().len();
        self.features.clear();
        self.features.add(&states, start - from);
        self.message_end = Some((end, self.features.clone()));
        Ok(tokens.len() - start)
    }

    /// Reads `message` whole, framed as [`frame_message`] frames it, as the chat's pass reads
    /// it when the guard rides along, on a session sized to it with [`REPLY_ROOM`] after it (as
    /// the guard model's context allows). Returns the framed tokens, the message's first token
    /// and the states at the spec's taps, or None when the message fills the guard model's
    /// context. A reply is then read on from the message's last window with all of the message
    /// before it, as riding: the head that judges replies to long messages learned them so
    /// (`crate::replies::reply_checkpoints`). The session is kept until the next message.
    pub fn read_whole(&mut self, message: &str) -> Result<Option<WholeMessage>> {
        let model = self.model.clone();
        let (tokens, start) = frame_message(&model, &self.spec.system_prompt, message)?;
        // A reply needs a token's room at least; a long one is read in what room there is.
        if tokens.len() >= model.hparams.n_ctx_train {
            return Ok(None);
        }
        let n_ctx = model.hparams.n_ctx_train.min(tokens.len() + REPLY_ROOM);
        // Drop a long message held before first: both are never held at once.
        self.whole = None;
        let mut whole = Session::new(model, n_ctx)?;
        let states = hidden_states(&mut whole, &tokens, &self.spec.taps)?;
        self.whole = Some(whole);
        self.set_message_end(&tokens, start, &states);
        Ok(Some(WholeMessage {
            tokens,
            start,
            states,
        }))
    }

    /// Makes the long message held by [`Reader::read_whole`] the one a reply is read after
    /// again, when `message` frames to it: true then, false when it must be read anew.
    pub fn reread_whole(&mut self, message: &str) -> Result<bool> {
        let Some(whole) = self.whole.as_mut() else {
            return Ok(false);
        };
        let (tokens, start) = frame_message(&self.model, &self.spec.system_prompt, message)?;
        if whole.tokens().get(..tokens.len()) != Some(tokens.as_slice()) {
            return Ok(false);
        }
        whole.truncate(tokens.len());
        // The last window's features were kept at the message's end: the cache holds keys
        // and values, not the tapped states, and reading them again would cost the message.
        match &self.message_end {
            Some((end, at_end)) if *end == tokens.len() && start < *end => {
                self.features = at_end.clone();
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// The features a reply to the framed `tokens` starts from: the message's last window.
    fn set_message_end(&mut self, tokens: &[u32], start: usize, states: &[Vec<f32>]) {
        let last = window_ranges(start, tokens.len(), self.spec.window)
            .pop()
            .unwrap_or(start..tokens.len());
        self.features.clear();
        self.features.add_rows(states, last);
        self.message_end = Some((tokens.len(), self.features.clone()));
    }

    /// Reads reply tokens after the message. When the cache is full, the reply read so far is
    /// dropped (it was judged already) and reading goes on from the end of the message.
    pub fn read_reply(&mut self, tokens: &[u32]) -> Result<()> {
        let Some((end, at_end)) = self.message_end.clone() else {
            return Err(SafetyError::Head("reply read before its message".into()));
        };
        let session = match self.whole.as_mut() {
            Some(whole) => whole,
            None => session(&mut self.session, &self.model, self.n_ctx)?,
        };
        let mut rest = tokens;
        while !rest.is_empty() {
            if session.tokens().len() >= session.n_ctx() {
                session.truncate(end);
                self.features = at_end.clone();
            }
            let n = rest.len().min(session.n_ctx() - session.tokens().len());
            if n == 0 {
                return Err(SafetyError::Head(
                    "the guard's cache has no room for the reply".into(),
                ));
            }
            let states = hidden_states(session, &rest[..n], &self.spec.taps)?;
            self.features.add(&states, 0);
            rest = &rest[n..];
        }
        Ok(())
    }

    /// The features of what was read since the last message began. None before any token.
    pub fn features(&self) -> Option<Vec<f32>> {
        self.features.vector()
    }
}

/// A message read whole by [`Reader::read_whole`]: its framed tokens, where the message
/// starts in them, and the states at the spec's taps, one (tokens, n_embd) matrix per tap.
pub struct WholeMessage {
    pub tokens: Vec<u32>,
    pub start: usize,
    pub states: Vec<Vec<f32>>,
}

/// Appends `tokens` to the reader's cache and returns their hidden states at `taps`, one
/// (tokens, n_embd) matrix per tap: it extends its own cache as text arrives, never re-reading
/// what it has seen.
fn hidden_states(session: &mut Session, tokens: &[u32], taps: &[usize]) -> Result<Vec<Vec<f32>>> {
    let mut out = Outputs::new();
    session.decode(&Batch::hidden(tokens, taps), &mut out)?;
    Ok(out.take_states())
}

/// The reader's session, made on first use.
fn session<'s>(
    slot: &'s mut Option<Session>,
    model: &Arc<Model>,
    n_ctx: usize,
) -> Result<&'s mut Session> {
    if slot.is_none() {
        *slot = Some(Session::new(model.clone(), n_ctx)?);
    }
    slot.as_mut()
        .ok_or_else(|| SafetyError::Head("the guard's session could not be made".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_the_message_with_overlap() {
        assert_eq!(window_ranges(3, 10, 128), vec![3..10]);
        let w = window_ranges(10, 1210, 128);
        assert_eq!(w.first().unwrap().start, 10);
        assert_eq!(w.last().unwrap().end, 1210);
        for pair in w.windows(2) {
            assert_eq!(pair[0].end - pair[1].start, window_overlap(128));
            assert!(pair[0].len() == 128);
        }
        assert!(w.iter().all(|r| r.len() <= 128));
        // Any run of half a window lies whole inside some window.
        for at in 10..1210 - 64 {
            assert!(w.iter().any(|r| r.start <= at && at + 64 <= r.end), "{at}");
        }
    }

    #[test]
    fn rows_added_in_a_range_are_its_mean_and_last() {
        // Two taps, width 2, four rows: row r is [r, 10 r].
        let m: Vec<f32> = (0..4).flat_map(|r| [r as f32, 10.0 * r as f32]).collect();
        let states = vec![m.clone(), m];
        let mut f = Features::new(2, 2);
        f.add_rows(&states, 1..3);
        assert_eq!(f.len(), 2);
        let v = f.vector().unwrap();
        assert_eq!(&v[..4], &[1.5, 15.0, 2.0, 20.0]);
        let mut all = Features::new(2, 2);
        all.add(&states, 1);
        assert_eq!(all.len(), 3);
        assert_eq!(&all.vector().unwrap()[..4], &[2.0, 20.0, 3.0, 30.0]);
    }

    #[test]
    fn a_long_message_read_whole_is_kept_for_its_reply_until_the_next_message() {
        let model = Model::load(&kostant_engine::testing::real_model_path())
            .expect("run scripts/setup.sh first");
        let mut reader = Reader::new(model.clone(), crate::train::default_spec()).unwrap();
        let long = "The harbour wall was rebuilt in the spring after the storms. ".repeat(80);
        let n = model.tokenizer.encode(&long, false).unwrap().len();
        assert!(n > reader.spec().window, "{n} tokens");
        let whole = reader.read_whole(&long).unwrap().expect("fits");
        assert_eq!(whole.states.len(), reader.spec().taps.len());
        let at_end = reader.features().unwrap();
        let held = reader.kv_bytes();
        assert!(held > 0);
        // The reply is read on the whole message's session, and read again from its end.
        let reply = model
            .tokenizer
            .encode("It sounds like a calm place.", false)
            .unwrap();
        reader.read_reply(&reply).unwrap();
        assert_ne!(reader.features().unwrap(), at_end);
        assert!(reader.reread_whole(&long).unwrap());
        assert_eq!(reader.features().unwrap(), at_end);
        reader.read_reply(&reply).unwrap();
        // Another message is not the one held.
        assert!(!reader
            .reread_whole(&long.replace("spring", "autumn"))
            .unwrap());
        // A short message drops it: only the kept session remains.
        reader.read_message("Hello there.").unwrap();
        assert!(reader.kv_bytes() < held);
        assert!(!reader.reread_whole(&long).unwrap());
    }
}
