//! Verification bookkeeping: after a pass over `[token, d1 .. dk]`, the cache holds the drafted
//! tokens too, row 0 of the outputs has the logits after `token` and row `i` those after `di`.
//! Each next token is sampled from its row against the draft for that position
//! ([`crate::sampling::Sampler::sample_or_accept`]); a draft that matches is already in the
//! cache, its row has the logits for the token after it, and no pass is needed. The first
//! mismatch rolls the cache back to just before the rejected draft.
//!
//! Every row was computed as a single step would compute it ([`crate::Batch::verify`]), so a
//! greedy reply is the plain reply token for token, and a rolled-back cache is the one plain
//! decoding would hold.

/// What the last verification pass left: its drafts and how far the reply has got through them.
#[derive(Debug, Default)]
pub struct Burst {
    drafts: Vec<u32>,
    /// Drafts accepted so far; the next token is sampled from row `next`.
    next: usize,
}

/// What became of a draft position once its token was sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No draft was waiting here: the token must be run.
    Undrafted,
    /// The draft was the token: it is in the cache, its logits are in the next row.
    Accepted,
    /// The draft differed: `rolled_back` drafted positions left the cache, the token must run.
    Rejected { rolled_back: usize },
}

impl Burst {
    /// Starts a new burst after a pass over a token and `drafts`.
    pub fn start(&mut self, drafts: &[u32]) {
        self.drafts.clear();
        self.drafts.extend_from_slice(drafts);
        self.next = 0;
    }

    /// The row of the outputs holding the logits for the next token.
    pub fn row(&self) -> usize {
        self.next
    }

    /// The drafted token for the next position, if one is waiting.
    pub fn pending(&self) -> Option<u32> {
        self.drafts.get(self.next).copied()
    }

    /// Drafts of this burst (accepted or not).
    pub fn drafted(&self) -> usize {
        self.drafts.len()
    }

    /// Drafts of this burst accepted so far.
    pub fn accepted(&self) -> usize {
        self.next
    }

    /// Drafted positions in the cache that are not accepted (yet).
    pub fn unsettled(&self) -> usize {
        self.drafts.len() - self.next
    }

    /// Settles the next position with the token the sampler chose there. On a rejection the
    /// caller truncates the cache by `rolled_back` tokens.
    pub fn settle(&mut self, token: u32) -> Verdict {
        match self.pending() {
            None => Verdict::Undrafted,
            Some(d) if d == token => {
                self.next += 1;
                Verdict::Accepted
            }
            Some(_) => {
                let rolled_back = self.unsettled();
                self.drafts.truncate(self.next);
                Verdict::Rejected { rolled_back }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_are_accepted_in_order_until_one_differs() {
        let mut b = Burst::default();
        assert_eq!(b.settle(5), Verdict::Undrafted);
        b.start(&[7, 8, 9]);
        assert_eq!((b.row(), b.pending()), (0, Some(7)));
        assert_eq!(b.settle(7), Verdict::Accepted);
        assert_eq!((b.row(), b.pending()), (1, Some(8)));
        assert_eq!(b.settle(4), Verdict::Rejected { rolled_back: 2 });
        assert_eq!((b.accepted(), b.unsettled(), b.pending()), (1, 0, None));
        assert_eq!(b.settle(4), Verdict::Undrafted);
    }

    #[test]
    fn a_burst_accepted_whole_leaves_nothing_pending() {
        let mut b = Burst::default();
        b.start(&[1, 2]);
        assert_eq!(b.settle(1), Verdict::Accepted);
        assert_eq!(b.settle(2), Verdict::Accepted);
        assert_eq!((b.row(), b.pending(), b.unsettled()), (2, None, 0));
    }
}
