//! A conversation's mutable state over a shared model: the KV cache and the tokens it holds.
//! Feeding a new prompt reuses the longest prefix already in the cache, so each chat turn only
//! pays for its new tokens.

use std::sync::Arc;

use crate::kv_cache::{KvCache, KvType};
use crate::model::{forward, forward_hidden, forward_tapped, Model, Workspace};
use crate::{EngineError, Result};

/// Prompts are run in chunks this long so scratch buffers stay small whatever the prompt.
pub(crate) const PREFILL_CHUNK: usize = 512;

pub struct Session {
    model: Arc<Model>,
    kv: KvCache,
    /// Exactly the tokens whose keys and values are in `kv`, in order.
    tokens: Vec<u32>,
    /// The forward pass's buffers, planned here once for a prefill chunk and reused by every
    /// pass: a decode step allocates nothing.
    ws: Workspace,
}

impl Session {
    /// A session with room for `n_ctx` tokens (capped at the model's training context), with
    /// the default f16 cache.
    pub fn new(model: Arc<Model>, n_ctx: usize) -> Result<Session> {
        Session::with_kv_type(model, n_ctx, KvType::F16)
    }

    /// [`Session::new`] with the cache stored as `kv_type`. Q8_0 fails with
    /// [`EngineError::InvalidRequest`] for a model whose head size is not a multiple of 32.
    pub fn with_kv_type(model: Arc<Model>, n_ctx: usize, kv_type: KvType) -> Result<Session> {
        if n_ctx == 0 {
            return Err(EngineError::InvalidRequest(
                "context size must be at least 1".into(),
            ));
        }
        let hp = &model.hparams;
        let n_ctx = n_ctx.min(hp.n_ctx_train);
        let kv = KvCache::with_type(kv_type, hp.n_layer, hp.kv_dim(), hp.head_dim, n_ctx)?;
        let ws = Workspace::plan(
            hp,
            PREFILL_CHUNK.min(n_ctx),
            n_ctx,
            rayon::current_num_threads(),
        );
        Ok(Session {
            model,
            kv,
            tokens: Vec::with_capacity(n_ctx),
            ws,
        })
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    pub fn n_ctx(&self) -> usize {
        self.kv.capacity()
    }

    /// Tokens currently held in the cache.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub fn kv_bytes(&self) -> usize {
        self.kv.bytes()
    }

    pub fn kv_type(&self) -> KvType {
        self.kv.kv_type()
    }

    /// Forgets the conversation.
    pub fn reset(&mut self) {
        self.kv.truncate(0);
        self.tokens.clear();
    }

    /// Makes the cache hold exactly `prompt` and returns the logits after its last token.
    /// Returns how many leading tokens were already cached (and so not recomputed).
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<(Vec<f32>, usize)> {
        let (logits, reused, _) = self.prefill_tapped(prompt, &[])?;
        Ok((logits, reused))
    }

    /// [`Session::prefill`] that also returns the hidden states at the layers in `taps` (as
    /// [`Session::extend_hidden`] numbers them) of every token it ran, that is `prompt[reused..]`:
    /// one (n, n_embd) matrix per tap.
    pub fn prefill_tapped(
        &mut self,
        prompt: &[u32],
        taps: &[usize],
    ) -> Result<(Vec<f32>, usize, Vec<Vec<f32>>)> {
        if prompt.is_empty() {
            return Err(EngineError::InvalidRequest("the prompt is empty".into()));
        }
        if prompt.len() > self.n_ctx() {
            return Err(EngineError::ContextOverflow {
                prompt_tokens: prompt.len(),
                context: self.n_ctx(),
            });
        }
        self.check_vocab(prompt)?;
        let common = self
            .tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        // At least the last token must run again: its logits are what we need.
        let reuse = common.min(prompt.len() - 1);
        self.kv.truncate(reuse);
        self.tokens.truncate(reuse);

        let mut logits = Vec::new();
        let mut states = vec![Vec::new(); taps.len()];
        let mut part = Vec::new();
        for chunk in prompt[reuse..].chunks(PREFILL_CHUNK) {
            self.run(chunk, taps, &mut logits, &mut part)?;
            for (all, part) in states.iter_mut().zip(&part) {
                all.extend_from_slice(part);
            }
        }
        Ok((logits, reuse, states))
    }

    /// Appends one token and returns the logits for the next.
    pub fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        let mut logits = Vec::new();
        self.step_into(token, &mut logits)?;
        Ok(logits)
    }

    /// [`Session::step`] into the caller's `logits`, which are overwritten (resized only if
    /// their length is not the vocabulary's). With a buffer kept between steps this allocates
    /// nothing: it is the decode loop's step.
    pub fn step_into(&mut self, token: u32, logits: &mut Vec<f32>) -> Result<()> {
        self.check_vocab(&[token])?;
        self.run(&[token], &[], logits, &mut Vec::new())
    }

    /// [`Session::step`] that also returns the token's hidden states at `taps`.
    pub fn step_tapped(&mut self, token: u32, taps: &[usize]) -> Result<(Vec<f32>, Vec<Vec<f32>>)> {
        let (mut logits, mut states) = (Vec::new(), Vec::new());
        self.step_tapped_into(token, taps, &mut logits, &mut states)?;
        Ok((logits, states))
    }

    /// [`Session::step_tapped`] into the caller's buffers (one per tap), reused as
    /// [`Session::step_into`] reuses `logits`: the decode step of a reply a classifier reads.
    pub fn step_tapped_into(
        &mut self,
        token: u32,
        taps: &[usize],
        logits: &mut Vec<f32>,
        states: &mut Vec<Vec<f32>>,
    ) -> Result<()> {
        self.check_vocab(&[token])?;
        self.run(&[token], taps, logits, states)
    }

    /// Appends `tokens` to the cache and returns their hidden states at the layers in `taps`
    /// (see [`crate::model::Model`]'s forward: tap `n_layer` is the final norm's output), one
    /// (tokens.len(), n_embd) matrix per tap. This is how a classifier reads text: it extends
    /// its own cache as text arrives, never re-reading what it has seen.
    pub fn extend_hidden(&mut self, tokens: &[u32], taps: &[usize]) -> Result<Vec<Vec<f32>>> {
        if tokens.is_empty() {
            return Err(EngineError::InvalidRequest("no tokens to run".into()));
        }
        if self.tokens.len() + tokens.len() > self.n_ctx() {
            return Err(EngineError::ContextOverflow {
                prompt_tokens: self.tokens.len() + tokens.len(),
                context: self.n_ctx(),
            });
        }
        self.check_vocab(tokens)?;
        let before = self.kv.len();
        let (model, kv, ws) = (&self.model, &mut self.kv, &mut self.ws);
        match kostant_kernels::in_pool(|| forward_hidden(model, kv, tokens, taps, ws)) {
            Ok(states) => {
                self.tokens.extend_from_slice(tokens);
                Ok(states)
            }
            Err(e) => {
                self.kv.truncate(before);
                Err(e)
            }
        }
    }

    /// Forgets every token after the first `len` (no-op if the cache holds fewer).
    pub fn truncate(&mut self, len: usize) {
        if len < self.tokens.len() {
            self.kv.truncate(len);
            self.tokens.truncate(len);
        }
    }

    /// Refuses ids past the vocabulary before anything in the cache changes.
    fn check_vocab(&self, tokens: &[u32]) -> Result<()> {
        let n_vocab = self.model.hparams.n_vocab;
        match tokens.iter().find(|&&t| t as usize >= n_vocab) {
            Some(bad) => Err(EngineError::InvalidRequest(format!(
                "token id {bad} is outside the vocabulary of {n_vocab}"
            ))),
            None => Ok(()),
        }
    }

    /// Runs `chunk`, copies the logits after its last token into `logits` and the hidden
    /// states at `taps` into `states` (untouched when `taps` is empty).
    fn run(
        &mut self,
        chunk: &[u32],
        taps: &[usize],
        logits: &mut Vec<f32>,
        states: &mut Vec<Vec<f32>>,
    ) -> Result<()> {
        let before = self.kv.len();
        // On a pool worker the pass's matmuls split their rows in place instead of waking the
        // pool from outside on every call (about 5 ms a token at 2 threads, measured).
        let (model, kv, ws) = (&self.model, &mut self.kv, &mut self.ws);
        let result = kostant_kernels::in_pool(|| {
            let l = match taps {
                [] => forward(model, kv, chunk, ws)?,
                _ => forward_tapped(model, kv, chunk, taps, ws, states)?,
            };
            if logits.len() != l.len() {
                logits.clear();
                logits.resize(l.len(), 0.0);
            }
            logits.copy_from_slice(l);
            Ok(())
        });
        match result {
            Ok(()) => {
                self.tokens.extend_from_slice(chunk);
                Ok(())
            }
            Err(e) => {
                // A failed pass may have written some layers; drop them so the cache and
                // `tokens` agree again.
                self.kv.truncate(before);
                Err(e)
            }
        }
    }
}
