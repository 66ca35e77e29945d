//! A small model drafting for a larger one of the same vocabulary (SmolLM2-135M for a larger
//! SmolLM2): it decodes greedily a few tokens ahead in a session of its own, which follows the
//! conversation by reusing its cached prefix, as a chat turn does.

use std::sync::Arc;

use super::Drafter;
use crate::batch::{Batch, Outputs};
use crate::sampling::argmax;
use crate::session::Session;
use crate::{EngineError, Model, Result};

pub struct DraftModel {
    session: Session,
    out: Outputs,
}

impl DraftModel {
    /// A drafter running `draft` with room for `n_ctx` tokens. Fails with
    /// [`EngineError::InvalidRequest`] unless `draft` tokenizes exactly as `target` does
    /// (see [`check_compatible`]).
    pub fn new(draft: Arc<Model>, target: &Model, n_ctx: usize) -> Result<DraftModel> {
        check_compatible(&draft, target)?;
        Ok(DraftModel {
            session: Session::new(draft, n_ctx)?,
            out: Outputs::new(),
        })
    }

    /// The draft model's name, as the CLI and `--json` report it.
    pub fn model_name(&self) -> String {
        self.session.model().name()
    }
}

/// A draft model must share the target's vocabulary, id for id, and its special tokens (as
/// llama.cpp's compatibility check asks), or its guesses would be other words.
pub fn check_compatible(draft: &Model, target: &Model) -> Result<()> {
    let (d, t) = (&draft.tokenizer, &target.tokenizer);
    let bad = |what: String| {
        Err(EngineError::InvalidRequest(format!(
            "the draft model {} cannot draft for {}: {what}",
            draft.name(),
            target.name()
        )))
    };
    if d.vocab_size() != t.vocab_size() {
        return bad(format!(
            "its vocabulary has {} tokens, the model's {}",
            d.vocab_size(),
            t.vocab_size()
        ));
    }
    if (d.bos_id(), d.eos_id(), d.add_bos()) != (t.bos_id(), t.eos_id(), t.add_bos()) {
        return bad("their start and end tokens differ".into());
    }
    let n = u32::try_from(t.vocab_size()).unwrap_or(u32::MAX);
    if let Some(id) = (0..n).find(|&id| d.token_bytes(id) != t.token_bytes(id)) {
        return bad(format!("token {id} is a different piece of text"));
    }
    Ok(())
}

impl Drafter for DraftModel {
    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) -> Result<()> {
        out.clear();
        // Room in the draft's own context: past it, draft nothing rather than fail the reply.
        let room = self.session.n_ctx().saturating_sub(history.len());
        let max = max.min(room);
        if max == 0 || history.is_empty() {
            return Ok(());
        }
        let kept = self.session.keep_prefix(history)?;
        // A fresh prompt runs as the model's own prompt runs; catching up with tokens the
        // target kept runs them as the target's verification did, so a draft model that is the
        // target computes the target's bits and guesses right.
        let catch_up = Batch {
            as_steps: kept > 0,
            ..Batch::prompt(&history[kept..])
        };
        self.session.decode(&catch_up, &mut self.out)?;
        for i in 0..max {
            let t = argmax(self.out.last_logits());
            out.push(t);
            if i + 1 < max {
                self.session.decode(&Batch::step(&t), &mut self.out)?;
            }
        }
        Ok(())
    }
}
