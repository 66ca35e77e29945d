//! SentencePiece BPE (`tokenizer.ggml.model = "llama"`): merges chosen by token score, with no
//! merge list, as llama.cpp's `llm_tokenizer_spm` does (Llama 1 and 2, Mistral, Gemma).
//!
//! Spaces are spelled U+2581 ("▁") before merging. Every character starts as its own symbol;
//! then, repeatedly, the adjacent pair whose concatenation is a vocabulary token with the
//! highest score is merged (ties go to the leftmost pair). A symbol left with no token (a
//! character outside the vocabulary) becomes its UTF-8 bytes as byte tokens `<0xXX>`.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use super::special::Fragment;
use crate::{EngineError, Result};

/// The vocabulary as SentencePiece merging sees it.
pub(crate) struct Spm {
    /// Every token's text, as stored (spaces as "▁"), to its id. Empty strings are left out:
    /// no pair of characters can form one.
    ids: HashMap<Box<str>, u32>,
    /// Indexed by id; finite, with -0.0 read as 0.0 so that ties compare as in C++.
    scores: Vec<f32>,
    /// The token for each byte: `<0xXX>`, else the byte itself as a one-character token.
    byte_ids: Box<[Option<u32>; 256]>,
    unk: Option<u32>,
    /// Whether a text fragment at the start or after a special token gets a leading space
    /// (`tokenizer.ggml.add_space_prefix`).
    add_space_prefix: bool,
}

/// A run of the escaped text, initially one character; merged symbols absorb their right
/// neighbour. Links are indices into the symbol list.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of `left` and its right neighbour `right`, whose text (`size` bytes) is
/// a token with `score`.
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

/// Highest score first, then leftmost: llama.cpp's `llm_bigram_spm::comparator`. Scores are
/// finite and -0.0 is normalized away, so `total_cmp` orders them as C++'s `<` does.
impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

impl Spm {
    /// `scores`, if given, has one entry per token; absent scores are all 0 (as in llama.cpp).
    pub(crate) fn new(
        tokens: &[&str],
        scores: Option<&[f32]>,
        unk: Option<u32>,
        add_space_prefix: bool,
    ) -> Result<Spm> {
        let bad = |what: String| Err(EngineError::Tokenizer(what));
        let scores: Vec<f32> = match scores {
            None => vec![0.0; tokens.len()],
            Some(s) if s.len() != tokens.len() => {
                return bad(format!(
                    "tokenizer.ggml.scores has {} entries for {} tokens",
                    s.len(),
                    tokens.len()
                ))
            }
            Some(s) => {
                if let Some(i) = s.iter().position(|x| !x.is_finite()) {
                    return bad(format!(
                        "token {i} ({:?}) has score {} (tokenizer.ggml.scores); expected a finite number",
                        tokens[i], s[i]
                    ));
                }
                // Adding 0.0 turns -0.0 into 0.0 and leaves every other value as it is.
                s.iter().map(|&x| x + 0.0).collect()
            }
        };
        let mut ids: HashMap<Box<str>, u32> = HashMap::with_capacity(tokens.len());
        for (i, &t) in tokens.iter().enumerate() {
            if t.is_empty() {
                continue;
            }
            if let Some(first) = ids.insert(t.into(), i as u32) {
                // llama.cpp refuses such a vocabulary too (it asserts one id per text).
                return bad(format!(
                    "token {i} ({t:?}) repeats token {first} (tokenizer.ggml.tokens)"
                ));
            }
        }
        let mut byte_ids = Box::new([None; 256]);
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            let hex = format!("<0x{b:02X}>");
            *slot = ids.get(hex.as_str()).copied().or_else(|| {
                let b = u8::try_from(b).ok().filter(u8::is_ascii)?;
                ids.get(char::from(b).to_string().as_str()).copied()
            });
        }
        Ok(Spm {
            ids,
            scores,
            byte_ids,
            unk,
            add_space_prefix,
        })
    }

    /// The id of the token spelled exactly `text` in the vocabulary.
    pub(crate) fn token_id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// Appends the ids of `fragments` (text, and tokens already split out) to `out`: llama.cpp's
    /// SPM branch of `llama_vocab::impl::tokenize` without BOS/EOS. A text fragment that opens
    /// the input or follows a split-out token gets a leading space if `add_space_prefix`.
    pub(crate) fn encode(&self, fragments: &[Fragment], out: &mut Vec<u32>) -> Result<()> {
        let mut after_special = true;
        let mut escaped = String::new();
        for fragment in fragments {
            match *fragment {
                Fragment::Text(text) => {
                    escaped.clear();
                    if self.add_space_prefix && after_special {
                        escaped.push('\u{2581}');
                    }
                    for c in text.chars() {
                        escaped.push(if c == ' ' { '\u{2581}' } else { c });
                    }
                    self.merge(&escaped, out)?;
                    after_special = false;
                }
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
            }
        }
        Ok(())
    }

    /// The merge loop of `llm_tokenizer_spm_session::tokenize` over one escaped text.
    fn merge(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        let n = text.chars().count();
        let mut symbols: Vec<Symbol> = text
            .char_indices()
            .enumerate()
            .map(|(i, (start, c))| Symbol {
                start,
                len: c.len_utf8(),
                prev: i.checked_sub(1),
                next: (i + 1 < n).then_some(i + 1),
            })
            .collect();

        let mut queue = BinaryHeap::new();
        for i in 1..symbols.len() {
            self.push_bigram(text, &symbols, i - 1, i, &mut queue);
        }
        while let Some(bigram) = queue.pop() {
            let (l, r) = (symbols[bigram.left], symbols[bigram.right]);
            // Stale: one side was merged away or has grown since the pair was queued.
            if l.len == 0 || r.len == 0 || l.len + r.len != bigram.size {
                continue;
            }
            symbols[bigram.left].len += r.len;
            symbols[bigram.left].next = r.next;
            symbols[bigram.right].len = 0;
            if let Some(next) = r.next {
                symbols[next].prev = Some(bigram.left);
            }
            if let Some(prev) = l.prev {
                self.push_bigram(text, &symbols, prev, bigram.left, &mut queue);
            }
            if let Some(next) = r.next {
                self.push_bigram(text, &symbols, bigram.left, next, &mut queue);
            }
        }

        // llama.cpp's `resegment` also keeps a reverse-merge map to split a symbol whose text is
        // no token; a merged symbol's text always is one (that is why it was merged), so only
        // single characters can fall through, to their bytes.
        let mut at = (!symbols.is_empty()).then_some(0);
        while let Some(i) = at {
            let s = symbols[i];
            let piece = &text[s.start..s.start + s.len];
            match self.ids.get(piece) {
                Some(&id) => out.push(id),
                None => {
                    for &b in piece.as_bytes() {
                        out.push(self.byte_token(b)?);
                    }
                }
            }
            at = s.next;
        }
        Ok(())
    }

    /// Queues the merge of `left` and `right` if their text together is a token.
    fn push_bigram(
        &self,
        text: &str,
        symbols: &[Symbol],
        left: usize,
        right: usize,
        queue: &mut BinaryHeap<Bigram>,
    ) {
        let start = symbols[left].start;
        let size = symbols[left].len + symbols[right].len;
        if let Some(&id) = self.ids.get(&text[start..start + size]) {
            queue.push(Bigram {
                score: self.scores[id as usize],
                left,
                right,
                size,
            });
        }
    }

    /// Byte fallback. llama.cpp throws when a vocabulary has neither `<0xXX>` nor the byte as
    /// a token; we use the unknown token if there is one, and otherwise say so.
    fn byte_token(&self, b: u8) -> Result<u32> {
        self.byte_ids[usize::from(b)].or(self.unk).ok_or_else(|| {
            EngineError::Tokenizer(format!(
                "byte 0x{b:02X} has no token (no <0x{b:02X}>) and the vocabulary has no unknown token"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vocabulary of `(text, score)` pairs; ids are positions.
    fn spm(vocab: &[(&str, f32)], unk: Option<u32>, add_space_prefix: bool) -> Spm {
        let tokens: Vec<&str> = vocab.iter().map(|v| v.0).collect();
        let scores: Vec<f32> = vocab.iter().map(|v| v.1).collect();
        Spm::new(&tokens, Some(&scores), unk, add_space_prefix).unwrap()
    }

    fn encode(s: &Spm, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        s.encode(&[Fragment::Text(text)], &mut out).unwrap();
        out
    }

    #[test]
    fn the_highest_scoring_pair_merges_first_and_ties_go_left() {
        let base = [("a", 0.0), ("b", 0.0), ("c", 0.0)];
        let with = |ab: f32, bc: f32| {
            let mut v = base.to_vec();
            v.extend([("ab", ab), ("bc", bc)]);
            spm(&v, None, false)
        };
        assert_eq!(encode(&with(-5.0, -1.0), "abc"), [0, 4]); // a + bc
        assert_eq!(encode(&with(-1.0, -5.0), "abc"), [3, 2]); // ab + c
        assert_eq!(encode(&with(-2.0, -2.0), "abc"), [3, 2]); // tie: leftmost pair
                                                              // -0.0 and 0.0 are the same score, so the tie still goes left.
        assert_eq!(encode(&with(-0.0, 0.0), "abc"), [3, 2]);
        assert_eq!(encode(&with(0.0, -0.0), "abc"), [3, 2]);
    }

    #[test]
    fn merges_need_every_intermediate_token() {
        // "abc" is a token but neither "ab" nor "bc" is, so it can never be formed.
        let s = spm(
            &[("a", 0.0), ("b", 0.0), ("c", 0.0), ("abc", 9.0)],
            None,
            false,
        );
        assert_eq!(encode(&s, "abc"), [0, 1, 2]);
        // "aa" merges once, leftmost; "aaa" is no token, so a stale pair is skipped.
        let s = spm(&[("a", 0.0), ("aa", -1.0)], None, false);
        assert_eq!(encode(&s, "aaa"), [1, 0]);
        assert_eq!(encode(&s, "aaaa"), [1, 1]);
    }

    #[test]
    fn spaces_are_spelled_and_prefixed_only_when_asked() {
        let v = [
            ("▁", -3.0),
            ("h", -1.0),
            ("i", -1.0),
            ("hi", -2.0),
            ("▁hi", -1.5),
        ];
        assert_eq!(encode(&spm(&v, None, false), "hi hi"), [3, 4]);
        assert_eq!(encode(&spm(&v, None, true), "hi hi"), [4, 4]);
        assert_eq!(encode(&spm(&v, None, true), " "), [0, 0]);
        // The prefix goes before text that opens the input or follows a split-out token.
        let s = spm(&v, None, true);
        let mut out = Vec::new();
        let frags = [
            Fragment::Text("hi"),
            Fragment::Token(99),
            Fragment::Text("hi"),
        ];
        s.encode(&frags, &mut out).unwrap();
        assert_eq!(out, [4, 99, 4]);
        let mut out = Vec::new();
        let frags = [
            Fragment::Token(99),
            Fragment::Text("hi"),
            Fragment::Text("hi"),
        ];
        s.encode(&frags, &mut out).unwrap();
        assert_eq!(out, [99, 4, 3]);
    }

    #[test]
    fn characters_without_a_token_fall_back_to_bytes_then_unk() {
        let mut v = vec![("<unk>", 0.0), ("a", 0.0)];
        let hex: Vec<String> = (0..=255u8).map(|b| format!("<0x{b:02X}>")).collect();
        v.extend(hex.iter().map(|h| (h.as_str(), 0.0)));
        let s = spm(&v, Some(0), false);
        // é is C3 A9.
        assert_eq!(encode(&s, "aé"), [1, 2 + 0xC3, 2 + 0xA9]);
        // Without byte tokens: an ASCII byte may be a one-character token, else unk.
        let s = spm(&[("<unk>", 0.0), ("a", 0.0), ("z", 0.0)], Some(0), false);
        assert_eq!(encode(&s, "é"), [0, 0]);
        // No byte token and no unk: a clear error, not a panic.
        let s = spm(&[("a", 0.0)], None, false);
        let mut out = Vec::new();
        let err = s.encode(&[Fragment::Text("aé")], &mut out).unwrap_err();
        assert!(err.to_string().contains("byte 0xC3 has no token"), "{err}");
    }

    #[test]
    fn hostile_scores_and_duplicates_are_refused() {
        let tokens = ["a", "b"];
        let err = |scores: &[f32]| Spm::new(&tokens, Some(scores), None, false).err().unwrap();
        let e = err(&[0.0]).to_string();
        assert!(
            e.contains("tokenizer.ggml.scores has 1 entries for 2 tokens"),
            "{e}"
        );
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let e = err(&[0.0, bad]).to_string();
            assert!(e.contains("token 1 (\"b\") has score"), "{e}");
        }
        let e = Spm::new(&["a", "b", "a"], None, None, false)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("token 2 (\"a\") repeats token 0"), "{e}");
        // No scores at all: every token scores 0, ties go left.
        let s = Spm::new(&["a", "b", "c", "ab", "bc"], None, None, false).unwrap();
        assert_eq!(encode(&s, "abc"), [3, 2]);
    }
}
