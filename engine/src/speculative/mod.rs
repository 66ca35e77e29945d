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
//! - [`policy::DraftPolicy`]: how many tokens to draft, from how often drafts have been right
//!   and what a verification pass has cost against a step on this machine: none when drafting
//!   would not pay, so text the drafter cannot guess costs no more than plain decoding.

pub mod draft;
pub mod lookup;
pub mod policy;
pub mod verify;

use std::fmt;
use std::str::FromStr;

use crate::Result;

/// Proposes tokens to follow a conversation.
pub trait Drafter: Send {
    /// Writes into `out` (emptied first) up to `max` tokens likely to follow `history` (the
    /// prompt and the reply so far, newest last). Writing none is always allowed.
    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) -> Result<()>;

    /// Whether a draft costs next to nothing to make (a lookup, not a model). A cheap drafter
    /// is still asked while the policy drafts nothing, and its guess is checked against the
    /// token that follows, so the policy notices when drafting starts to pay.
    fn is_cheap(&self) -> bool {
        false
    }
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
    /// What the product runs: prompt lookup. It drafts nothing where the conversation does
    /// not repeat itself, and only as much as pays where it does (BENCHMARKS.md, issue 24:
    /// never measurably slower than plain decoding, and faster on input-grounded tasks).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speculation_names_round_trip() {
        for s in [Speculation::Off, Speculation::Lookup] {
            assert_eq!(s.name().parse::<Speculation>(), Ok(s));
        }
        let err = "ngram".parse::<Speculation>().unwrap_err();
        assert!(err.contains("lookup"), "{err}");
    }
}
