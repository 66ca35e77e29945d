//! A conversation's mutable state over a shared model: the KV cache and the tokens it holds.
//! Feeding a new prompt reuses the longest prefix already in the cache, so each chat turn only
//! pays for its new tokens.

use std::sync::Arc;

use crate::adapter::ActiveAdapter;
use crate::batch::{Batch, LogitRows, Outputs};
use crate::kv_cache::{piece_bytes, read_piece, KvCache, KvType, SnapshotHeader};
use crate::limits::PREFILL_CHUNK;
use crate::model::side_path::SidePaths;
use crate::model::{forward, Model, Pass, Workspace};
use crate::speculative::Drafter;
use crate::{EngineError, Result};

pub struct Session {
    model: Arc<Model>,
    kv: KvCache,
    /// Exactly the tokens whose keys and values are in `kv`, in order.
    tokens: Vec<u32>,
    /// The LoRA adapter every pass applies, if any; the cached rows were computed under it.
    adapter: Option<ActiveAdapter>,
    /// The forward pass's buffers, planned here once for a prefill chunk and reused by every
    /// pass: a decode step allocates nothing.
    ws: Workspace,
    /// The drafter this session's speculative generations use instead of prompt lookup (a
    /// small draft model, `--draft-model`). It travels with the session, as the adapter does,
    /// so every way a reply is run (the CLI, the app's worker thread) drafts with it.
    drafter: Option<Box<dyn Drafter>>,
}

impl Session {
    /// A session with room for `n_ctx` tokens (capped at the model's training context), with
    /// the default f16 cache.
    pub fn new(model: Arc<Model>, n_ctx: usize) -> Result<Session> {
        Session::with_kv_type(model, n_ctx, KvType::F16)
    }

    /// [`Session::new`] with the cache stored as `kv_type`. Q8_0 and Q4_0 fail with
    /// [`EngineError::InvalidRequest`] for a model whose head size is not a multiple of 32.
    pub fn with_kv_type(model: Arc<Model>, n_ctx: usize, kv_type: KvType) -> Result<Session> {
        let windows = model.hparams.windows();
        Session::with_cache_windows(model, n_ctx, kv_type, &windows)
    }

    /// [`Session::with_kv_type`] with the cache's layers windowed as `windows` says (None:
    /// the layer stores the whole context). The model's own windows are the only ones a
    /// session runs with; tests also run its windowed layers over a full-length cache, the
    /// reference the ring must equal (`testing::session_with_full_cache`).
    pub(crate) fn with_cache_windows(
        model: Arc<Model>,
        n_ctx: usize,
        kv_type: KvType,
        windows: &[Option<usize>],
    ) -> Result<Session> {
        if n_ctx == 0 {
            return Err(EngineError::InvalidRequest(
                "context size must be at least 1".into(),
            ));
        }
        let hp = &model.hparams;
        let n_ctx = n_ctx.min(hp.n_ctx_train);
        let kv = KvCache::with_windows(kv_type, windows, hp.kv_dim(), hp.head_dim, n_ctx)?;
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
            adapter: None,
            ws,
            drafter: None,
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

    /// Bytes the kv cache holds: the whole context for global layers, a ring of the window
    /// and one prefill chunk for sliding-window ones.
    pub fn kv_bytes(&self) -> usize {
        self.kv.bytes()
    }

    pub fn kv_type(&self) -> KvType {
        self.kv.kv_type()
    }

    /// The adapter this session's passes apply, if any.
    pub fn adapter(&self) -> Option<&ActiveAdapter> {
        self.adapter.as_ref()
    }

    /// Switches the adapter every later pass applies (None: the base model alone), with no
    /// reload of the model. The cached rows were computed under the adapter before, so a real
    /// change forgets them (the prefix cache is keyed on tokens and adapter: a prefix computed
    /// under another adapter is never reused); setting the same adapter and scale again keeps
    /// them. An adapter loaded for another model file, or a scale that is not finite, is
    /// refused and nothing changes.
    pub fn set_adapter(&mut self, adapter: Option<ActiveAdapter>) -> Result<()> {
        if let Some(a) = &adapter {
            if !a.adapter.fits(&self.model) {
                return Err(EngineError::Adapter(format!(
                    "adapter {:?} was loaded for another model than {:?}",
                    a.adapter.name(),
                    self.model.name()
                )));
            }
            if !a.scale.is_finite() {
                return Err(EngineError::InvalidRequest(format!(
                    "adapter scale {} is not a number",
                    a.scale
                )));
            }
        }
        let id = |a: &Option<ActiveAdapter>| a.as_ref().map(ActiveAdapter::id);
        if id(&adapter) != id(&self.adapter) {
            self.reset();
        }
        self.adapter = adapter;
        Ok(())
    }

    /// Attaches the drafter speculative generations on this session use instead of prompt
    /// lookup (None: back to lookup). Replies are the same either way; only their speed
    /// changes. Plain decoding (`Speculation::Off`) never drafts.
    pub fn set_drafter(&mut self, drafter: Option<Box<dyn Drafter>>) {
        self.drafter = drafter;
    }

    /// Whether a drafter of its own is attached ([`Session::set_drafter`]).
    pub fn has_drafter(&self) -> bool {
        self.drafter.is_some()
    }

    /// Takes the attached drafter out for one generation (it drafts while the session
    /// verifies, so both cannot be borrowed from the session at once).
    pub(crate) fn take_drafter(&mut self) -> Option<Box<dyn Drafter>> {
        self.drafter.take()
    }

    /// Forgets the conversation.
    pub fn reset(&mut self) {
        self.kv.truncate(0);
        self.tokens.clear();
    }

    /// Keeps the longest prefix of the cached tokens that `prompt` starts with, but never all of
    /// `prompt` (its last token must run again: its logits are what the caller needs), and
    /// returns its length (0 when a sliding-window layer no longer holds that prefix's window;
    /// see [`Session::truncate`]). Then `decode` the rest, `prompt[kept..]`: each chat turn
    /// pays only for its new tokens. A prompt that could not run (empty, longer than the context, an id
    /// outside the vocabulary) is refused before the cache changes.
    pub fn keep_prefix(&mut self, prompt: &[u32]) -> Result<usize> {
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
        let keep = common.min(prompt.len() - 1);
        Ok(self.truncate(keep))
    }

    /// Runs `batch` after the tokens already cached and writes what it asks for into `out`
    /// (emptied first; its buffers are reused, so a step with the same `out` allocates nothing).
    /// Fails before touching the cache on an empty batch, an id outside the vocabulary or a
    /// batch that would overflow the context; a pass that fails midway leaves the cache as it
    /// was before the batch (or empty, when the batch ran past a sliding window's rows: see
    /// [`Session::truncate`]).
    pub fn decode(&mut self, batch: &Batch, out: &mut Outputs) -> Result<()> {
        let tokens = batch.tokens;
        out.clear(batch.taps.len());
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
        let before = self.tokens.len();
        let chunks = tokens.len().div_ceil(PREFILL_CHUNK);
        for (i, chunk) in tokens.chunks(PREFILL_CHUNK).enumerate() {
            // Logits of the last token come from the last chunk only.
            let logits = match batch.logits {
                LogitRows::Last if i + 1 < chunks => LogitRows::None,
                l => l,
            };
            let part = Batch {
                tokens: chunk,
                logits,
                ..*batch
            };
            // A chunk without logits in a batch that wants them runs every layer: later
            // chunks attend to all of them.
            if let Err(e) = self.run(&part, batch.logits == LogitRows::None, out) {
                // A failed pass may have written some layers; drop everything of this batch
                // so the cache and `tokens` agree again.
                self.truncate(before);
                out.clear(batch.taps.len());
                return Err(e);
            }
        }
        Ok(())
    }

    /// Forgets every token after the first `len` (no-op if the cache holds fewer) and returns
    /// how many it keeps. That is `len`, unless a sliding-window layer has already dropped
    /// rows the window at `len` needs (it keeps its window, the last pass and
    /// `kv_cache::ROLLBACK_SLACK` positions before it): then it keeps 0, and the caller runs
    /// the tokens again (`keep_prefix` says how many to run). A rollback within the last pass,
    /// such as a rejected draft's, always keeps `len`.
    pub fn truncate(&mut self, len: usize) -> usize {
        // Also when `len` is the length: a pass that failed midway may have written some
        // layers past it.
        let kept = self.kv.truncate(len.min(self.tokens.len()));
        self.tokens.truncate(kept);
        kept
    }

    /// What this session's rows belong to: the header its snapshots carry, and the one a
    /// snapshot must match to be restored here.
    pub fn snapshot_header(&self) -> SnapshotHeader {
        let hp = &self.model.hparams;
        SnapshotHeader {
            fingerprint: self.model.fingerprint(),
            architecture: hp.arch.name().to_string(),
            kv_type: self.kv.kv_type(),
            adapter: self.adapter.as_ref().map(ActiveAdapter::id),
            n_ctx: self.n_ctx(),
            n_layer: hp.n_layer,
            kv_dim: hp.kv_dim(),
            head_dim: hp.head_dim,
        }
    }

    /// The tokens and cached rows of positions `from..` as one snapshot piece (see
    /// `kv_cache::snapshot`): after a reply, `from` is where the cache first differs from
    /// what was saved, so only new rows are written. None when there is nothing after `from`.
    pub fn snapshot_piece(&self, from: usize) -> Option<Vec<u8>> {
        if from >= self.tokens.len() {
            return None;
        }
        let mut rows = Vec::new();
        self.kv.copy_positions(from, &mut rows);
        Some(piece_bytes(
            from,
            &self.tokens[from..],
            &rows,
            self.kv.has_windows(),
        ))
    }

    /// Replaces this session's context with a snapshot's: `header` then its `pieces` in order,
    /// each after truncating to where it starts. Returns the tokens restored. Everything is
    /// read as hostile input; a snapshot made for another model file, cache type, shape or
    /// adapter, one that does not fit this context, or one with a malformed piece is refused
    /// with the reason, and the session is then empty (the caller re-reads the conversation).
    pub fn restore(&mut self, header: &[u8], pieces: &[&[u8]]) -> Result<usize> {
        self.reset();
        let result = self.restore_into_empty(header, pieces);
        if result.is_err() {
            self.reset();
        }
        result
    }

    fn restore_into_empty(&mut self, header: &[u8], pieces: &[&[u8]]) -> Result<usize> {
        let saved = SnapshotHeader::from_bytes(header)?;
        let here = self.snapshot_header();
        if let Some(why) = saved.mismatch(&here) {
            return Err(EngineError::Snapshot(format!(
                "cannot restore it here: {why}"
            )));
        }
        if pieces.is_empty() {
            return Err(EngineError::Snapshot("it holds no positions".into()));
        }
        let n_vocab = self.model.hparams.n_vocab;
        let windows = self.kv.windows();
        for (i, bytes) in pieces.iter().enumerate() {
            let piece = read_piece(bytes, &here, self.n_ctx(), n_vocab, &windows)?;
            if piece.start > self.tokens.len() {
                return Err(EngineError::Snapshot(format!(
                    "piece {} starts at position {} but the pieces before it end at {}",
                    i + 1,
                    piece.start,
                    self.tokens.len()
                )));
            }
            // Not `truncate`: a windowed layer that no longer holds the window at the piece's
            // start is fine when the piece brings its own (`load_piece` checks).
            self.tokens.truncate(piece.start);
            self.kv
                .load_piece(piece.start, piece.tokens.len(), &piece.layers)
                .map_err(|e| EngineError::Snapshot(format!("piece {}: {e}", i + 1)))?;
            self.tokens.extend_from_slice(&piece.tokens);
        }
        Ok(self.tokens.len())
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

    /// One forward pass over `batch` (at most a prefill chunk), appending to `out`. `shallow`
    /// lets a pass without logits stop at its deepest tap.
    fn run(&mut self, batch: &Batch, shallow: bool, out: &mut Outputs) -> Result<()> {
        let (kv, ws) = (&mut self.kv, &mut self.ws);
        let pass = Pass {
            model: &self.model,
            adapter: self.adapter.as_ref().map(|a| a as &dyn SidePaths),
            order: batch.sum_order(),
        };
        // On a pool worker the pass's matmuls split their rows in place instead of waking the
        // pool from outside on every call (about 5 ms a token at 2 threads, measured).
        kostant_kernels::in_pool(|| forward(&pass, kv, batch, shallow, ws, out))?;
        self.tokens.extend_from_slice(batch.tokens);
        Ok(())
    }
}
