//! How the guard reads text: its own session on the guard model, a fixed preamble kept in the
//! cache, then the text's tokens, appended as they arrive. The features are, for each tapped
//! layer, the mean hidden state over the text's tokens and the hidden state of its last token;
//! both update in place as tokens are appended, so a streamed reply is never re-read.

use std::sync::Arc;

use kostant_engine::{Model, Session};

use crate::{Result, SafetyError};

/// Which layers are read and which preamble each role gets; stored with the trained head so a
/// head is always read the way it was trained.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FeatureSpec {
    /// Layer taps as `Session::extend_hidden` takes them (n_layer = after the final norm).
    pub taps: Vec<usize>,
    /// Text that comes before a user's message.
    pub input_preamble: String,
    /// Text that comes before an assistant's reply.
    pub output_preamble: String,
    /// Most text tokens read in one window; longer text is read in overlapping windows.
    pub window: usize,
}

impl FeatureSpec {
    pub fn dim(&self, n_embd: usize) -> usize {
        2 * self.taps.len() * n_embd
    }
}

/// Whose words are being read: they are introduced differently, so the head can tell a request
/// for harm from a reply that gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Input,
    Output,
}

pub struct Reader {
    session: Session,
    spec: FeatureSpec,
    role: Option<Role>,
    preamble_len: usize,
    n_embd: usize,
    /// Per tap: the sum of the text tokens' hidden states (f64: long replies add many terms).
    sums: Vec<Vec<f64>>,
    /// Per tap: the hidden state of the last text token.
    last: Vec<Vec<f32>>,
    count: usize,
}

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
        let n_embd = model.hparams.n_embd;
        let longest = [&spec.input_preamble, &spec.output_preamble]
            .iter()
            .map(|p| model.tokenizer.encode(p, false).map(|t| t.len()))
            .collect::<std::result::Result<Vec<_>, _>>()?
            .into_iter()
            .max()
            .unwrap_or(0);
        let session = Session::new(model.clone(), longest + spec.window + 1)?;
        if session.n_ctx() < longest + spec.window {
            return Err(SafetyError::Head(format!(
                "the guard model's context ({}) cannot hold a {}-token window",
                session.n_ctx(),
                spec.window
            )));
        }
        let taps = spec.taps.len();
        Ok(Reader {
            session,
            spec,
            role: None,
            preamble_len: 0,
            n_embd,
            sums: vec![vec![0.0; n_embd]; taps],
            last: vec![vec![0.0; n_embd]; taps],
            count: 0,
        })
    }

    pub fn spec(&self) -> &FeatureSpec {
        &self.spec
    }

    pub fn model(&self) -> &Arc<Model> {
        self.session.model()
    }

    /// Bytes of the guard's own KV cache.
    pub fn kv_bytes(&self) -> usize {
        self.session.kv_bytes()
    }

    /// Text tokens read since the last `start`.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Room left in the current window.
    pub fn room(&self) -> usize {
        self.spec.window.saturating_sub(self.count)
    }

    /// Begins a new text in `role`. The preamble's states stay cached between texts of the
    /// same role, so starting again costs nothing.
    pub fn start(&mut self, role: Role) -> Result<()> {
        if self.role != Some(role) || self.session.tokens().len() < self.preamble_len {
            let preamble = match role {
                Role::Input => &self.spec.input_preamble,
                Role::Output => &self.spec.output_preamble,
            };
            let tokens = self.session.model().tokenizer.encode(preamble, false)?;
            self.session.reset();
            if !tokens.is_empty() {
                // All taps, so the cache holds every layer the text will read.
                self.session.extend_hidden(&tokens, &self.spec.taps)?;
            }
            self.preamble_len = tokens.len();
            self.role = Some(role);
        }
        self.session.truncate(self.preamble_len);
        for s in &mut self.sums {
            s.iter_mut().for_each(|v| *v = 0.0);
        }
        self.count = 0;
        Ok(())
    }

    /// Reads more text tokens (at most `room()` of them).
    pub fn push(&mut self, tokens: &[u32]) -> Result<()> {
        if tokens.is_empty() {
            return Ok(());
        }
        if self.role.is_none() {
            return Err(SafetyError::Head("reader used before start".into()));
        }
        if tokens.len() > self.room() {
            return Err(SafetyError::Head(format!(
                "{} tokens do not fit the {} left in the guard's window",
                tokens.len(),
                self.room()
            )));
        }
        let states = self.session.extend_hidden(tokens, &self.spec.taps)?;
        let e = self.n_embd;
        for ((state, sum), last) in states.iter().zip(&mut self.sums).zip(&mut self.last) {
            for row in state.chunks_exact(e) {
                for (s, &v) in sum.iter_mut().zip(row) {
                    *s += v as f64;
                }
            }
            last.copy_from_slice(&state[state.len() - e..]);
        }
        self.count += tokens.len();
        Ok(())
    }

    /// The features of the text read so far: per tap, [mean, last]. None before any token.
    pub fn features(&self) -> Option<Vec<f32>> {
        if self.count == 0 {
            return None;
        }
        let mut f = Vec::with_capacity(self.spec.dim(self.n_embd));
        for (sum, last) in self.sums.iter().zip(&self.last) {
            f.extend(sum.iter().map(|&s| (s / self.count as f64) as f32));
            f.extend_from_slice(last);
        }
        Some(f)
    }
}
