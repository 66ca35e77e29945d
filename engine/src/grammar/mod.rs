//! Grammar-constrained decoding: llama.cpp's GBNF grammars (and JSON schemas converted to one)
//! decide which tokens may come next, so the reply is certain to have the asked-for shape.
//!
//! - `parse` reads GBNF text, `compile` flattens it into [`Grammar`], refusing undefined rules
//!   and left recursion; [`json_schema`] writes GBNF for a JSON schema (read by `json`, which
//!   keeps the order of an object's keys).
//! - [`stacks`] holds the parse stacks and advances them by a character; [`matcher`]'s
//!   [`GrammarState`] follows a generation byte by byte (a token may end inside a UTF-8
//!   character), [`transitions`] remembers its steps; [`vocab`] walks a prefix trie of the model's tokens once per masking step;
//!   [`constraint`] is what the sampler holds.
//!
//! The matching rules are llama.cpp's (`llama-grammar.cpp`), so that greedy output under a
//! grammar is the same as `llama-completion --grammar-file`.

mod compile;
pub mod constraint;
mod json;
pub mod json_schema;
mod limits;
pub mod matcher;
mod parse;
pub mod stacks;
pub mod transitions;
pub mod vocab;

use std::fmt;

use crate::Result;

pub use matcher::GrammarState;
pub use vocab::GrammarVocab;

/// One element of a compiled rule, as llama.cpp lays rules out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Elem {
    /// Closes a rule's last alternative.
    End,
    /// Separates two alternatives of a rule.
    Alt,
    RuleRef(u32),
    /// A character class of matching code points: its first code point (or range start).
    Char(u32),
    /// A negated character class: its first code point (or range start).
    CharNot(u32),
    /// Another code point (or range start) of the class before it.
    CharAlt(u32),
    /// The upper end of the range started by the element before it.
    RngUpper(u32),
    /// `.`: any character.
    Any,
}

impl Elem {
    fn ends_alternative(self) -> bool {
        matches!(self, Elem::End | Elem::Alt)
    }
}

/// A compiled grammar: immutable, shared by every generation that uses it.
#[derive(Clone, PartialEq)]
pub struct Grammar {
    pub(crate) elems: Vec<Elem>,
    /// Index of each rule's first element.
    pub(crate) rule_start: Vec<u32>,
    names: Vec<String>,
    pub(crate) root: u32,
    /// For each element opening a character class: the index just past the class.
    pub(crate) class_end: Vec<u32>,
    /// For each element opening a character class: which ASCII code points it accepts, so the
    /// common case is one bit test.
    pub(crate) ascii: Vec<u128>,
}

impl fmt::Debug for Grammar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grammar")
            .field("rules", &self.names.len())
            .field("elements", &self.elems.len())
            .finish()
    }
}

impl Grammar {
    /// Parses and compiles GBNF text. Errors give the line and column of the problem.
    pub fn parse(text: &str) -> Result<Grammar> {
        compile::compile(parse::parse(text)?)
    }

    /// The grammar of JSON documents valid under the JSON schema `text` (see [`json_schema`]).
    pub fn from_json_schema(text: &str) -> Result<Grammar> {
        Grammar::parse(&json_schema::to_gbnf(text)?)
    }

    /// Rules, named and generated.
    pub fn rule_count(&self) -> usize {
        self.names.len()
    }

    pub(crate) fn from_rules(bodies: Vec<Vec<Vec<Elem>>>, names: Vec<String>, root: u32) -> Self {
        let mut elems = Vec::new();
        let mut rule_start = Vec::with_capacity(bodies.len());
        for alts in bodies {
            rule_start.push(elems.len() as u32);
            for (i, seq) in alts.into_iter().enumerate() {
                if i > 0 {
                    elems.push(Elem::Alt);
                }
                elems.extend(seq);
            }
            elems.push(Elem::End);
        }
        let mut g = Grammar {
            class_end: vec![0; elems.len()],
            ascii: vec![0; elems.len()],
            elems,
            rule_start,
            names,
            root,
        };
        g.index_classes();
        g
    }

    fn index_classes(&mut self) {
        for p in 0..self.elems.len() {
            if matches!(self.elems[p], Elem::Char(_) | Elem::CharNot(_) | Elem::Any) {
                let (end, _) = self.scan_class(p, |_, _| false);
                self.class_end[p] = end as u32;
                let mut bits = 0u128;
                for c in 0..128u32 {
                    if self.match_slow(p, c) {
                        bits |= 1 << c;
                    }
                }
                self.ascii[p] = bits;
            }
        }
    }

    /// Walks the class opening at `p`, calling `hit(lo, hi)` for each range until it says
    /// true. Returns the index past the class and whether a range was hit.
    fn scan_class(&self, p: usize, mut hit: impl FnMut(u32, u32) -> bool) -> (usize, bool) {
        let mut i = p;
        let mut found = false;
        loop {
            let lo = match self.elems[i] {
                Elem::Char(c) | Elem::CharNot(c) | Elem::CharAlt(c) => c,
                Elem::Any => {
                    found = true;
                    i += 1;
                    if matches!(self.elems.get(i), Some(Elem::CharAlt(_))) {
                        continue;
                    }
                    return (i, found);
                }
                _ => return (i, found),
            };
            let hi = match self.elems.get(i + 1) {
                Some(Elem::RngUpper(h)) => {
                    i += 2;
                    *h
                }
                _ => {
                    i += 1;
                    lo
                }
            };
            found = found || hit(lo, hi);
            if !matches!(self.elems.get(i), Some(Elem::CharAlt(_))) {
                return (i, found);
            }
        }
    }

    fn is_negated(&self, p: usize) -> bool {
        matches!(self.elems[p], Elem::CharNot(_))
    }

    fn match_slow(&self, p: usize, c: u32) -> bool {
        let (_, found) = self.scan_class(p, |lo, hi| lo <= c && c <= hi);
        found != self.is_negated(p)
    }

    /// Whether the class opening at `p` accepts code point `c`.
    pub(crate) fn match_char(&self, p: usize, c: u32) -> bool {
        if c < 128 {
            return self.ascii[p] >> c & 1 == 1;
        }
        self.match_slow(p, c)
    }

    /// Whether a character starting with the bytes read so far (`value`, with `n_remain`
    /// continuation bytes to come) could be accepted by the class at `p`; llama.cpp's rule,
    /// including its answer for negated classes (false as soon as a range meets the span).
    pub(crate) fn match_partial(&self, p: usize, value: u32, n_remain: u32) -> bool {
        if n_remain == 1 && value < 2 {
            // An overlong encoding of a 7-bit character.
            return false;
        }
        let shift = 6 * n_remain;
        let mut low = value << shift;
        let high = low | ((1u32 << shift) - 1);
        if low == 0 {
            low = match n_remain {
                2 => 1 << 11,
                3 => 1 << 16,
                _ => low,
            };
        }
        if matches!(self.elems[p], Elem::Any) {
            return true;
        }
        let (_, met) = self.scan_class(p, |lo, hi| lo <= high && low <= hi);
        met != self.is_negated(p)
    }

    /// Whether the class at `p` may accept some code point in `lo..=hi`: exact for a class of
    /// matching code points; for a negated one, false only when one of its ranges covers the
    /// span. Used to cut off a trie branch inside a character, so it must never say false
    /// where a code point could match.
    pub(crate) fn may_match_span(&self, p: usize, lo: u32, hi: u32) -> bool {
        if matches!(self.elems[p], Elem::Any) {
            return true;
        }
        if self.is_negated(p) {
            let (_, covered) = self.scan_class(p, |a, b| a <= lo && hi <= b);
            !covered
        } else {
            self.scan_class(p, |a, b| a <= hi && lo <= b).1
        }
    }

    /// The element after a class or rule reference at `p`.
    pub(crate) fn after(&self, p: usize) -> usize {
        match self.elems[p] {
            Elem::RuleRef(_) => p + 1,
            _ => self.class_end[p] as usize,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_match_as_written() {
        let g = Grammar::parse("root ::= [a-cx] [^0-9] . [\\u00e0-\\u00ff]").unwrap();
        let starts: Vec<usize> = (0..g.elems.len())
            .filter(|&p| matches!(g.elems[p], Elem::Char(_) | Elem::CharNot(_) | Elem::Any))
            .collect();
        let [pos, neg, any, latin] = starts[..] else {
            panic!("{:?}", g.elems)
        };
        assert!(g.match_char(pos, 'b' as u32) && g.match_char(pos, 'x' as u32));
        assert!(!g.match_char(pos, 'd' as u32));
        assert!(g.match_char(neg, 'a' as u32) && !g.match_char(neg, '5' as u32));
        assert!(g.match_char(neg, 0x4E2D));
        assert!(g.match_char(any, '\n' as u32) && g.match_char(any, 0x1F600));
        assert!(g.match_char(latin, 0xE9) && !g.match_char(latin, 'e' as u32));
        // 0xC3 starts U+00C0..U+00FF: it may become 'é'.
        assert!(g.match_partial(latin, 0x03, 1));
        assert!(!g.match_partial(pos, 0x03, 1));
    }
}
