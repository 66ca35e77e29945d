//! Splitting control and user-defined tokens out of text before the vocabulary's own algorithm
//! runs, exactly as llama.cpp's `tokenizer_st_partition` does (used by the SentencePiece path).
//!
//! llama.cpp takes the special tokens longest first and, for each, cuts every remaining text
//! fragment at each occurrence, left to right. That is not HF's leftmost-longest matching when
//! two tokens overlap in the text ("ab" and "bcd" in "abcd": llama.cpp keeps "bcd"), so it is
//! reproduced here as written. Only the order among tokens of equal length is ours (by id);
//! llama.cpp's `std::sort` leaves it unspecified, which matters only if two distinct tokens of
//! the same length overlap in a text.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

use super::TokenKind;
use crate::{EngineError, Result};

/// A piece of the input: text still to be tokenized, or a token split out whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

/// The control, unknown and user-defined tokens of a vocabulary, in llama.cpp's search order.
pub(crate) struct SpecialTokens {
    /// Rank `r` (longest first, then by id) holds the token's text, id and whether it is split
    /// out only when special tokens are parsed (control and unknown tokens).
    texts: Vec<Box<str>>,
    ids: Vec<u32>,
    parse_only: Vec<bool>,
    /// Finds which tokens occur in a text at all, so the cutting below visits only those
    /// instead of searching the text once per token (Gemma 3 has 6414 of them). A token absent
    /// from the whole text is absent from every fragment of it, so this changes no result.
    finder: Option<AhoCorasick>,
}

impl SpecialTokens {
    pub(crate) fn new(tokens: &[&str], kinds: &[TokenKind]) -> Result<SpecialTokens> {
        let mut ranked: Vec<u32> = (0..tokens.len() as u32)
            .filter(|&i| {
                let k = kinds[i as usize];
                !tokens[i as usize].is_empty() && (k.is_special() || k == TokenKind::UserDefined)
            })
            .collect();
        ranked.sort_by_key(|&i| (std::cmp::Reverse(tokens[i as usize].len()), i));
        let texts: Vec<Box<str>> = ranked.iter().map(|&i| tokens[i as usize].into()).collect();
        let parse_only = ranked
            .iter()
            .map(|&i| kinds[i as usize].is_special())
            .collect();
        let finder = if texts.is_empty() {
            None
        } else {
            let ac = AhoCorasickBuilder::new()
                .match_kind(MatchKind::Standard)
                .build(texts.iter().map(|t| t.as_bytes()))
                .map_err(|e| {
                    EngineError::Tokenizer(format!("cannot index the special tokens: {e}"))
                })?;
            Some(ac)
        };
        Ok(SpecialTokens {
            texts,
            ids: ranked,
            parse_only,
            finder,
        })
    }

    /// `text` cut into fragments. User-defined tokens are always split out; control and
    /// unknown tokens only with `parse_special`. An empty text gives no fragment.
    pub(crate) fn split<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        let mut fragments = Vec::new();
        if text.is_empty() {
            return fragments;
        }
        fragments.push(Fragment::Text(text));
        let Some(finder) = &self.finder else {
            return fragments;
        };
        let mut present: Vec<usize> = finder
            .find_overlapping_iter(text)
            .map(|m| m.pattern().as_usize())
            .filter(|&r| parse_special || !self.parse_only[r])
            .collect();
        present.sort_unstable();
        present.dedup();
        for rank in present {
            let (needle, id) = (&*self.texts[rank], self.ids[rank]);
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for fragment in fragments {
                let Fragment::Text(mut rest) = fragment else {
                    next.push(fragment);
                    continue;
                };
                while let Some(at) = rest.find(needle) {
                    if at > 0 {
                        next.push(Fragment::Text(&rest[..at]));
                    }
                    next.push(Fragment::Token(id));
                    rest = &rest[at + needle.len()..];
                }
                if !rest.is_empty() {
                    next.push(Fragment::Text(rest));
                }
            }
            fragments = next;
        }
        fragments
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Fragment::{Text, Token};

    fn specials(tokens: &[&str], kinds: &[TokenKind]) -> SpecialTokens {
        SpecialTokens::new(tokens, kinds).unwrap()
    }

    #[test]
    fn longest_token_is_cut_first_like_llama_cpp() {
        use TokenKind::*;
        let s = specials(
            &["a", "ab", "bcd", "<c>"],
            &[Normal, UserDefined, UserDefined, Control],
        );
        // "bcd" (longer) wins over "ab", although "ab" starts further left.
        assert_eq!(s.split("abcd", false), [Text("a"), Token(2)]);
        assert_eq!(s.split("xabx", false), [Text("x"), Token(1), Text("x")]);
        // Control tokens only with parse_special; repeated and adjacent occurrences.
        assert_eq!(s.split("<c><c>ab", false), [Text("<c><c>"), Token(1)]);
        assert_eq!(s.split("<c><c>ab", true), [Token(3), Token(3), Token(1)]);
        assert_eq!(s.split("", true), []);
        assert_eq!(s.split("zz", true), [Text("zz")]);
    }

    #[test]
    fn runs_of_a_character_take_the_longest_token_repeatedly() {
        use TokenKind::*;
        let s = specials(&["\n", "\n\n", "\n\n\n"], &[UserDefined; 3]);
        assert_eq!(
            s.split("a\n\n\n\n\n\nb\n\n", false),
            [Text("a"), Token(2), Token(2), Text("b"), Token(1)]
        );
        assert_eq!(s.split("\n\n\n\n", false), [Token(2), Token(0)]);
    }
}
