//! Speculative decoding: a drafter guesses the next few tokens, one batched pass of the model
//! verifies them all, and the longest run the model agrees with is kept. A 3B model's decode
//! is bound by memory bandwidth, so a pass over several tokens costs little more than a pass
//! over one, and every accepted token is a pass saved.
//!
//! - [`Drafter`]: who guesses. [`lookup::PromptLookup`] copies what followed the latest
//!   occurrence of the last few tokens in the conversation (input-grounded tasks repeat their
//!   input); [`draft::DraftModel`] runs a small model of the same vocabulary.
//! - [`verify::Burst`]: what a verification pass left in the cache, and the rule that keeps or
//!   rolls back each drafted token. The generation loop ([`crate::generate`]) uses both.
//! - [`DraftLength`]: how many tokens to draft, shrinking while drafts are rejected so text
//!   the drafter cannot guess costs no more than plain decoding.

pub mod draft;
pub mod lookup;
pub mod verify;

use std::fmt;
use std::str::FromStr;

use crate::Result;

/// Proposes tokens to follow a conversation.
pub trait Drafter: Send {
    /// Writes into `out` (emptied first) up to `max` tokens likely to follow `history` (the
    /// prompt and the reply so far, newest last). Writing none is always allowed.
    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) -> Result<()>;
}

/// Which drafter a generation uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Speculation {
    /// Plain decoding: one pass per token.
    Off,
    /// Prompt lookup ([`lookup::PromptLookup`]).
    Lookup,
}

impl Default for Speculation {
    /// What the product runs: prompt lookup, which drafts nothing (and so costs nothing) where
    /// the conversation does not repeat itself (BENCHMARKS.md, issue 24).
    fn default() -> Speculation {
        Speculation::Lookup
    }
}

impl Speculation {
    pub fn name(self) -> &'static str {
        match self {
            Speculation::Off => "off",
            Speculation::Lookup => "lookup",
        }
    }
}

impl fmt::Display for Speculation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Speculation {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Speculation, String> {
        match s {
            "off" => Ok(Speculation::Off),
            "lookup" => Ok(Speculation::Lookup),
            other => Err(format!(
                "unknown speculation '{other}': use 'lookup' or 'off'"
            )),
        }
    }
}

/// The draft length, adapted to how well drafts have been doing: it doubles after a draft
/// accepted whole and falls to one more than what was accepted after a rejection, between 1
/// and `max`.
#[derive(Clone, Copy, Debug)]
pub struct DraftLength {
    now: usize,
    max: usize,
}

impl DraftLength {
    pub fn new(start: usize, max: usize) -> DraftLength {
        let max = max.max(1);
        DraftLength {
            now: start.clamp(1, max),
            max,
        }
    }

    /// Tokens to draft next.
    pub fn get(&self) -> usize {
        self.now
    }

    /// Learns from a verified draft: `accepted` of its `drafted` tokens were kept.
    pub fn update(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        self.now = if accepted >= drafted {
            (self.now * 2).min(self.max)
        } else {
            (accepted + 1).clamp(1, self.max)
        };
    }
}

impl Default for DraftLength {
    /// Up to 16 drafted tokens, starting from 4.
    fn default() -> DraftLength {
        DraftLength::new(4, 16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_draft_length_grows_on_success_and_falls_on_rejection() {
        let mut k = DraftLength::new(4, 16);
        k.update(4, 4);
        assert_eq!(k.get(), 8);
        k.update(8, 8);
        k.update(16, 16);
        assert_eq!(k.get(), 16);
        k.update(16, 2);
        assert_eq!(k.get(), 3);
        k.update(3, 0);
        assert_eq!(k.get(), 1);
        k.update(0, 0);
        assert_eq!(k.get(), 1);
    }

    #[test]
    fn speculation_names_round_trip() {
        for s in [Speculation::Off, Speculation::Lookup] {
            assert_eq!(s.name().parse::<Speculation>(), Ok(s));
        }
        let err = "ngram".parse::<Speculation>().unwrap_err();
        assert!(err.contains("lookup"), "{err}");
    }
}
