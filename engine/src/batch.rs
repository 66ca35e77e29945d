//! What one call into a session runs and what it hands back: [`Batch`] in, [`Outputs`] out, the
//! single way into [`crate::Session::decode`] (llama.cpp's `llama_decode(batch)` is the model).

use kostant_kernels::attention::F16SumOrder;

/// Which positions of a batch get logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogitRows {
    /// None: the pass only extends the cache (and fills taps). With taps and no logits, layers
    /// past the deepest tap are skipped, so a classifier pays only for what it reads.
    None,
    /// The last token's: what picking the next token needs.
    Last,
    /// Every token's: what verifying drafted tokens needs.
    All,
}

/// Tokens to append to a session's cache, at positions `session.tokens().len()..`.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    pub tokens: &'a [u32],
    pub logits: LogitRows,
    /// Layers whose hidden states to return for every token, numbered as in
    /// [`crate::model`]'s forward pass: `l < n_layer` is the residual stream after layer `l`,
    /// `n_layer` the final RMSNorm's output.
    pub taps: &'a [usize],
    /// Run every row as a single decode step would: attention and an adapter's side paths sum
    /// in the one-row order, so each row's logits and states carry exactly the bits a run of
    /// steps would give. Without
    /// it a batch of several rows sums in the prompt order, as llama.cpp's prefill does (the
    /// two differ in the last bits: kernels' `F16SumOrder`).
    pub as_steps: bool,
}

impl<'a> Batch<'a> {
    /// A prompt (or the rest of one): the last token's logits.
    pub fn prompt(tokens: &'a [u32]) -> Batch<'a> {
        Batch {
            tokens,
            logits: LogitRows::Last,
            taps: &[],
            as_steps: false,
        }
    }

    /// One decode step.
    pub fn step(token: &'a u32) -> Batch<'a> {
        Batch::prompt(std::slice::from_ref(token))
    }

    /// Tokens to verify: logits at every position, each row as a step would compute it.
    pub fn verify(tokens: &'a [u32]) -> Batch<'a> {
        Batch {
            tokens,
            logits: LogitRows::All,
            taps: &[],
            as_steps: true,
        }
    }

    /// Text a classifier reads: hidden states at `taps`, no logits.
    pub fn hidden(tokens: &'a [u32], taps: &'a [usize]) -> Batch<'a> {
        Batch {
            tokens,
            logits: LogitRows::None,
            taps,
            as_steps: false,
        }
    }

    /// The order the batch's pass sums its f16 dots in: a prompt's for several rows, one row's
    /// for one row or a batch run [`as_steps`](Self::as_steps).
    pub(crate) fn sum_order(&self) -> F16SumOrder {
        F16SumOrder::for_batch(if self.as_steps { 1 } else { self.tokens.len() })
    }

    /// The same batch, also returning hidden states at `taps`.
    pub fn with_taps(self, taps: &'a [usize]) -> Batch<'a> {
        Batch { taps, ..self }
    }
}

/// What a [`Batch`] produced, in buffers reused from call to call: with one kept between steps a
/// decode step allocates nothing.
#[derive(Clone, Debug, Default)]
pub struct Outputs {
    /// `rows` rows of `n_vocab` logits, one after another.
    pub(crate) logits: Vec<f32>,
    pub(crate) rows: usize,
    /// One (tokens, n_embd) matrix per tap, in the batch's tap order.
    pub(crate) states: Vec<Vec<f32>>,
}

impl Outputs {
    pub fn new() -> Outputs {
        Outputs::default()
    }

    /// Rows of logits held: 0, 1 ([`LogitRows::Last`]) or one per token ([`LogitRows::All`]).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The logits of row `i`.
    ///
    /// # Panics
    /// If `i >= self.rows()`.
    pub fn logits(&self, i: usize) -> &[f32] {
        let n = self.row_len();
        &self.logits[i * n..(i + 1) * n]
    }

    /// The logits of row `i`, to sample from (sampling penalises them in place).
    ///
    /// # Panics
    /// If `i >= self.rows()`.
    pub fn logits_mut(&mut self, i: usize) -> &mut [f32] {
        let n = self.row_len();
        &mut self.logits[i * n..(i + 1) * n]
    }

    /// The last row's logits (empty when the batch asked for none).
    pub fn last_logits(&self) -> &[f32] {
        match self.rows {
            0 => &[],
            r => self.logits(r - 1),
        }
    }

    /// [`Outputs::last_logits`], mutable.
    pub fn last_logits_mut(&mut self) -> &mut [f32] {
        match self.rows {
            0 => &mut [],
            r => self.logits_mut(r - 1),
        }
    }

    /// Hidden states per tap: (tokens, n_embd) each.
    pub fn states(&self) -> &[Vec<f32>] {
        &self.states
    }

    /// Moves the hidden states out, leaving empty buffers.
    pub fn take_states(&mut self) -> Vec<Vec<f32>> {
        std::mem::take(&mut self.states)
    }

    fn row_len(&self) -> usize {
        self.logits.len().checked_div(self.rows).unwrap_or(0)
    }

    /// Empties the outputs for a new batch, keeping their memory.
    pub(crate) fn clear(&mut self, n_taps: usize) {
        self.logits.clear();
        self.rows = 0;
        self.states.resize_with(n_taps, Vec::new);
        self.states.iter_mut().for_each(Vec::clear);
    }
}
