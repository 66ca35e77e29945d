//! Prompt lookup (Saxena 2023; llama.cpp's `llama-lookup` is a statistical cousin): the last
//! few tokens of the conversation are looked up earlier in it, and what followed their latest
//! earlier occurrence is the draft. Proofreading, rewriting, summarising and replying quote the
//! user's text, so long runs of it come back verbatim; open chat rarely matches, and then
//! nothing is drafted and decoding is plain.

use super::Drafter;
use crate::Result;

/// Drafts by matching the last `min_ngram..=max_ngram` tokens, longest first.
#[derive(Clone, Copy, Debug)]
pub struct PromptLookup {
    pub min_ngram: usize,
    pub max_ngram: usize,
}

impl Default for PromptLookup {
    /// Matches of 2 to 4 tokens: a single token (a space, "the") recurs everywhere and its
    /// continuations are mostly wrong.
    fn default() -> PromptLookup {
        PromptLookup {
            min_ngram: 2,
            max_ngram: 4,
        }
    }
}

impl PromptLookup {
    /// Where the longest suffix of `history` (of `min_ngram..=max_ngram` tokens) last occurred
    /// before, as the index just past that occurrence.
    fn continuation_start(&self, history: &[u32]) -> Option<usize> {
        let len = history.len();
        for n in (self.min_ngram.max(1)..=self.max_ngram).rev() {
            if n >= len {
                continue;
            }
            let key = &history[len - n..];
            // Latest first: the most recent context is the likeliest to continue alike.
            if let Some(i) = (0..len - n).rev().find(|&i| &history[i..i + n] == key) {
                return Some(i + n);
            }
        }
        None
    }
}

impl Drafter for PromptLookup {
    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) -> Result<()> {
        out.clear();
        if let Some(start) = self.continuation_start(history) {
            let end = (start + max).min(history.len());
            out.extend_from_slice(&history[start..end]);
        }
        Ok(())
    }

    fn is_cheap(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(history: &[u32], max: usize) -> Vec<u32> {
        let mut out = vec![99];
        PromptLookup::default()
            .draft(history, max, &mut out)
            .unwrap();
        out
    }

    #[test]
    fn the_latest_occurrence_of_the_longest_match_is_continued() {
        // "5 6" occurs twice; its latest earlier occurrence is followed by 9 9.
        let h = [1, 5, 6, 7, 8, 2, 5, 6, 9, 9, 3, 5, 6];
        assert_eq!(draft(&h, 2), vec![9, 9]);
        // A longer match wins over a more recent shorter one: "4 5 6" at the start.
        let h = [4, 5, 6, 1, 2, 5, 6, 3, 3, 4, 5, 6];
        assert_eq!(draft(&h, 3), vec![1, 2, 5]);
    }

    #[test]
    fn nothing_is_drafted_without_a_match_or_room() {
        assert_eq!(draft(&[1, 2, 3, 4], 8), Vec::<u32>::new());
        assert_eq!(draft(&[1, 2, 1, 2], 0), Vec::<u32>::new());
        assert_eq!(draft(&[], 4), Vec::<u32>::new());
        assert_eq!(draft(&[7], 4), Vec::<u32>::new());
    }

    #[test]
    fn a_draft_stops_at_the_end_of_the_history() {
        // "1 2" last occurred at the start; only "1 2" follows it before the end.
        assert_eq!(draft(&[1, 2, 1, 2], 8), vec![1, 2]);
    }
}
