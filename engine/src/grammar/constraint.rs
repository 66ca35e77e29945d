//! The grammar as the sampler uses it: may this token come next, mask the logits of the
//! tokens that may not, take the chosen token, and how many of a drafter's tokens in a row the
//! grammar allows.

use std::sync::Arc;

use super::{Grammar, GrammarState, GrammarVocab};

pub struct Constraint {
    state: GrammarState,
    vocab: Arc<GrammarVocab>,
    allowed: Vec<bool>,
}

impl Constraint {
    pub fn new(grammar: Arc<Grammar>, vocab: Arc<GrammarVocab>) -> Constraint {
        Constraint {
            state: GrammarState::new(grammar),
            vocab,
            allowed: Vec::new(),
        }
    }

    pub fn state(&self) -> &GrammarState {
        &self.state
    }

    /// Whether token `id` may come next.
    pub fn allows(&mut self, id: u32) -> bool {
        if self.vocab.is_end(id) {
            return self.state.can_end();
        }
        self.state.accepts(self.vocab.piece(id))
    }

    /// Sets the logit of every token the grammar refuses here to minus infinity. Returns how
    /// many tokens it allows.
    pub fn mask(&mut self, logits: &mut [f32]) -> usize {
        let n = self.vocab.allowed(&mut self.state, &mut self.allowed);
        for (l, &ok) in logits.iter_mut().zip(&self.allowed) {
            if !ok {
                *l = f32::NEG_INFINITY;
            }
        }
        // Rows past the vocabulary (padded output matrices) are never text.
        if logits.len() > self.allowed.len() {
            logits[self.allowed.len()..].fill(f32::NEG_INFINITY);
        }
        n
    }

    /// Takes token `id` as the next one; an end token changes nothing. False (and nothing
    /// taken) if the grammar refuses it.
    pub fn accept(&mut self, id: u32) -> bool {
        if self.vocab.is_end(id) {
            return self.state.can_end();
        }
        self.state.advance(self.vocab.piece(id))
    }

    /// The token that ends the reply when the grammar leaves nothing else.
    pub fn end_token(&self) -> Option<u32> {
        self.vocab.end_ids().first().copied()
    }

    /// How many of `drafts`, in order from the current state, the grammar allows: a drafted
    /// token it refuses, and all after it, can never be accepted.
    pub fn allowed_prefix(&mut self, drafts: &[u32]) -> usize {
        let vocab = &self.vocab;
        let pieces = drafts
            .iter()
            .map(|&d| (!vocab.is_end(d)).then(|| vocab.piece(d)));
        self.state.accepted_run(pieces)
    }
}
