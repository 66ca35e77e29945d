//! System prompts read once: the cached rows of each feature's system prompt (per model,
//! adapter, cache type and context, as a snapshot's header says), kept so that a new
//! conversation starts from them instead of reading its system prompt again. A new chat, or a
//! switch to another feature, then only pays for the user's message.
//!
//! Only the system prompt's own rows are kept: a conversation's turns never reach another
//! conversation through here.

use kostant_engine::{Batch, Message, Outputs, Role, Session};

use crate::error::AppError;

/// Prefixes kept at once: the features' system prompts, with room to spare.
const KEPT: usize = 8;

struct Prefix {
    /// The snapshot header of the session that read it: a prefix read under another model,
    /// adapter, cache type or context is never restored.
    header: Vec<u8>,
    tokens: Vec<u32>,
    piece: Vec<u8>,
}

#[derive(Default)]
pub struct SystemPrefixes {
    /// Newest last.
    kept: Vec<Prefix>,
    counts: PrefixCounts,
}

/// How often a system prompt was read, and how often a kept one was restored instead.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixCounts {
    pub read: usize,
    pub restored: usize,
}

impl SystemPrefixes {
    /// Makes `session` start with the rendered `system` prompt when the prompt it is about to
    /// run (`prompt`) does: kept as it is when it already holds them, restored from a kept
    /// prefix when there is one, read (and kept) otherwise. Returns None when the session was
    /// left as it was, else how many tokens came from a kept prefix (0: read now).
    pub fn prepare(
        &mut self,
        session: &mut Session,
        system: &str,
        prompt: &[u32],
    ) -> Result<Option<usize>, AppError> {
        let model = session.model().clone();
        let tokens = model
            .chat_template
            .render(
                &model.tokenizer,
                &[Message::new(Role::System, system)],
                false,
            )?
            .tokens;
        // Only a prompt that strictly goes on after the system prompt has a prefix to share
        // (its last token must run anyway, for its logits).
        if tokens.is_empty() || prompt.len() <= tokens.len() || !prompt.starts_with(&tokens) {
            return Ok(None);
        }
        if session.tokens().starts_with(&tokens) {
            return Ok(None);
        }
        let header = session.snapshot_header().to_bytes();
        let found = self
            .kept
            .iter()
            .position(|p| p.tokens == tokens && p.header == header);
        if let Some(i) = found {
            // Taken out and put back newest; a prefix that will not restore is dropped and
            // read again below: it costs time, not the reply.
            let p = self.kept.remove(i);
            if let Ok(n) = session.restore(&p.header, &[&p.piece]) {
                self.kept.push(p);
                self.counts.restored += 1;
                return Ok(Some(n));
            }
        }
        session.reset();
        session.decode(&Batch::prompt(&tokens), &mut Outputs::new())?;
        self.counts.read += 1;
        if let Some(piece) = session.snapshot_piece(0) {
            if self.kept.len() >= KEPT {
                self.kept.remove(0);
            }
            self.kept.push(Prefix {
                header,
                tokens,
                piece,
            });
        }
        Ok(Some(0))
    }

    /// How often a system prompt was read, and how often kept rows served instead.
    pub fn counts(&self) -> PrefixCounts {
        self.counts
    }
}
