//! Following a generation through a grammar byte by byte. Tokens are bytes, and a token may end
//! inside a UTF-8 character, so the state is the parse stacks plus the character begun but not
//! finished. The rules are llama.cpp's: each finished character advances the stacks, and a token
//! ending inside a character is allowed if some stack's class could still accept that
//! character. One rule is stricter: bytes that cannot be UTF-8 (a stray continuation byte, an
//! overlong form, a surrogate, a code point past U+10FFFF) are refused as soon as they are
//! read, where llama.cpp lets some through, so the text a grammar allows is always valid UTF-8.

use std::sync::Arc;

use super::stacks::{Arena, DONE};
use super::transitions::Transitions;
use super::Grammar;

/// A UTF-8 character begun by the bytes read so far: its bits and how many continuation bytes
/// it still needs (0: none begun).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Partial {
    value: u32,
    n_remain: u32,
    /// Bytes of the whole character.
    len: u32,
}

impl Partial {
    pub fn is_none(self) -> bool {
        self.n_remain == 0
    }
}

/// Continuation bytes a leading byte announces, by its high nibble (llama.cpp's table: a
/// continuation byte cannot lead).
const UTF8_LEN: [i8; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4];

/// Whether a character begun as `value` with `n_remain` bytes to come (of `len` in all) can
/// still become a valid UTF-8 character: not overlong, not a surrogate, at most U+10FFFF.
fn viable(value: u32, n_remain: u32, len: u32) -> bool {
    const MIN: [u32; 4] = [0, 0x80, 0x800, 0x10000];
    let shift = 6 * n_remain;
    let lo = value << shift;
    let hi = lo | ((1u32 << shift) - 1);
    let min = MIN[(len as usize).clamp(1, 4) - 1];
    hi >= min && lo <= 0x10FFFF && !(lo >= 0xD800 && hi <= 0xDFFF)
}

/// What a byte makes of the character being read.
enum Read {
    /// The character is complete: this code point.
    Char(u32),
    /// The character still needs bytes.
    Open(Partial),
}

/// Reads byte `b` into `partial` (llama.cpp's decoding, stricter about what is UTF-8); `None`
/// if the bytes cannot be UTF-8.
fn read_byte(partial: Partial, b: u8) -> Option<Read> {
    let (value, n_remain, len) = if partial.n_remain > 0 {
        if b >> 6 != 2 {
            return None;
        }
        let value = (partial.value << 6) | u32::from(b & 0x3F);
        (value, partial.n_remain - 1, partial.len)
    } else {
        let n = UTF8_LEN[usize::from(b >> 4)] - 1;
        if n < 0 {
            return None;
        }
        let mask = (1u32 << (7 - n)) - 1;
        (u32::from(b) & mask, n as u32, n as u32 + 1)
    };
    if !viable(value, n_remain, len) {
        return None;
    }
    Some(match n_remain {
        0 => Read::Char(value),
        _ => Read::Open(Partial {
            value,
            n_remain,
            len,
        }),
    })
}

/// Reads byte `b` after `set` and `partial`: the stacks after it go into `out` (cleared first)
/// and the character still open is returned, or `None` if no parse accepts the byte.
pub fn step(
    g: &Grammar,
    arena: &mut Arena,
    set: &[u32],
    partial: Partial,
    b: u8,
    out: &mut Vec<u32>,
) -> Option<Partial> {
    match read_byte(partial, b)? {
        Read::Open(p) => {
            out.clear();
            out.extend_from_slice(set);
            Some(p)
        }
        Read::Char(c) => {
            arena.advance(g, set, c, out);
            (!out.is_empty()).then_some(Partial::default())
        }
    }
}

/// [`step`] over interned sets (see [`Transitions`]): the set id after byte `b` and the
/// character still open, or `None` if no parse accepts the byte.
pub fn step_interned(
    g: &Grammar,
    arena: &mut Arena,
    tr: &mut Transitions,
    set: u32,
    partial: Partial,
    b: u8,
) -> Option<(u32, Partial)> {
    match read_byte(partial, b)? {
        // A character no stack could accept, whatever bytes follow, ends the branch here.
        Read::Open(p) => may_finish(g, arena, tr.set(set), p).then_some((set, p)),
        Read::Char(c) => Some((tr.advance(g, arena, set, c)?, Partial::default())),
    }
}

/// Whether some stack of `set` could accept a character begun as `partial`.
fn may_finish(g: &Grammar, arena: &Arena, set: &[u32], partial: Partial) -> bool {
    let shift = 6 * partial.n_remain;
    let lo = partial.value << shift;
    let hi = lo | ((1u32 << shift) - 1);
    set.iter()
        .any(|&s| s != DONE && g.may_match_span(arena.top(s) as usize, lo, hi))
}

/// Whether a token may end here: every character finished and some parse alive, or a
/// character open that some stack's class could still accept.
pub fn may_end_token(g: &Grammar, arena: &Arena, set: &[u32], partial: Partial) -> bool {
    if partial.is_none() {
        return !set.is_empty();
    }
    set.iter().any(|&s| {
        s != DONE && g.match_partial(arena.top(s) as usize, partial.value, partial.n_remain)
    })
}

/// Where a generation stands in a grammar. Cloning copies the stacks' arena: cheap early in
/// a generation, and never needed by the generation loop itself.
#[derive(Clone)]
pub struct GrammarState {
    grammar: Arc<Grammar>,
    arena: Arena,
    transitions: Transitions,
    stacks: Vec<u32>,
    partial: Partial,
    scratch: Vec<u32>,
    scratch2: Vec<u32>,
}

impl GrammarState {
    /// At the start of `grammar`'s root rule.
    pub fn new(grammar: Arc<Grammar>) -> GrammarState {
        let mut arena = Arena::default();
        let mut stacks = Vec::new();
        arena.initial(&grammar, &mut stacks);
        GrammarState {
            grammar,
            arena,
            transitions: Transitions::default(),
            stacks,
            partial: Partial::default(),
            scratch: Vec::new(),
            scratch2: Vec::new(),
        }
    }

    pub fn grammar(&self) -> &Arc<Grammar> {
        &self.grammar
    }

    /// Whether the text so far is a whole sentence of the grammar (an end token may come).
    pub fn can_end(&self) -> bool {
        self.partial.is_none() && self.stacks.contains(&DONE)
    }

    /// Whether the text so far is a whole sentence that nothing may follow.
    pub fn is_finished(&self) -> bool {
        self.partial.is_none() && self.stacks == [DONE]
    }

    /// Whether `bytes` may follow the text so far (at least the start of a character that
    /// may). Changes nothing but scratch space.
    pub fn accepts(&mut self, bytes: &[u8]) -> bool {
        let (stacks, partial) = (std::mem::take(&mut self.stacks), self.partial);
        let ok = self.walk(&stacks, partial, bytes).is_some();
        self.stacks = stacks;
        ok
    }

    /// Reads `bytes` if the grammar allows them (see [`GrammarState::accepts`]) and says
    /// whether it did; refused bytes leave the state as it was.
    pub fn advance(&mut self, bytes: &[u8]) -> bool {
        let stacks = std::mem::take(&mut self.stacks);
        match self.walk(&stacks, self.partial, bytes) {
            Some(partial) => {
                self.stacks = std::mem::take(&mut self.scratch);
                self.scratch = stacks;
                self.partial = partial;
                if self.arena.wants_compaction() {
                    self.arena.compact(&mut self.stacks);
                    self.transitions.clear();
                }
                true
            }
            None => {
                self.stacks = stacks;
                false
            }
        }
    }

    /// How many of `pieces`, read one after another from here, the grammar allows, without
    /// moving. `None` stands for an end token: allowed where the text may end, and nothing
    /// follows it.
    pub fn accepted_run<'p>(
        &mut self,
        pieces: impl IntoIterator<Item = Option<&'p [u8]>>,
    ) -> usize {
        let mut set = self.stacks.clone();
        let mut partial = self.partial;
        let mut n = 0;
        for piece in pieces {
            let Some(bytes) = piece else {
                return n + usize::from(partial.is_none() && set.contains(&DONE));
            };
            match self.walk(&set, partial, bytes) {
                Some(p) => {
                    std::mem::swap(&mut set, &mut self.scratch);
                    partial = p;
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    /// Walks `bytes` from `set` and `partial`; on success the stacks are in `self.scratch`.
    /// Bytes from a NUL on are not read, as llama.cpp reads a token's text as a C string;
    /// nothing at all (an empty token) is refused.
    fn walk(&mut self, set: &[u32], partial: Partial, bytes: &[u8]) -> Option<Partial> {
        let bytes = &bytes[..bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len())];
        if bytes.is_empty() {
            return None;
        }
        self.scratch.clear();
        self.scratch.extend_from_slice(set);
        let mut p = partial;
        for &b in bytes {
            p = step(
                &self.grammar,
                &mut self.arena,
                &self.scratch,
                p,
                b,
                &mut self.scratch2,
            )?;
            std::mem::swap(&mut self.scratch, &mut self.scratch2);
        }
        may_end_token(&self.grammar, &self.arena, &self.scratch, p).then_some(p)
    }

    /// The grammar, the arena, the remembered steps, the stacks and the open character, for a
    /// walk over many tokens at once.
    pub(crate) fn parts(&mut self) -> (&Grammar, &mut Arena, &mut Transitions, &[u32], Partial) {
        (
            &self.grammar,
            &mut self.arena,
            &mut self.transitions,
            &self.stacks,
            self.partial,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(g: &str) -> GrammarState {
        GrammarState::new(Arc::new(Grammar::parse(g).unwrap()))
    }

    #[test]
    fn accepts_and_rejects_strings() {
        let mut s = state("root ::= (\"yes\" | \"no\") \".\"?");
        assert!(s.accepts(b"ye") && s.accepts(b"no.") && !s.accepts(b"yo"));
        assert!(!s.accepts(b"") && !s.can_end());
        assert!(s.advance(b"y") && s.advance(b"es"));
        assert!(s.can_end() && !s.is_finished());
        assert!(!s.advance(b"!"));
        assert!(s.advance(b"."));
        assert!(s.is_finished() && !s.accepts(b"."));
    }

    #[test]
    fn a_character_may_split_across_tokens() {
        // "é" is C3 A9, "€" is E2 82 AC.
        let mut s = state("root ::= \"caf\" [\\u00e9] \"€\"");
        assert!(s.advance(b"caf\xC3"));
        assert!(!s.accepts(b"\xAA"), "é is A9, not AA");
        assert!(s.advance(b"\xA9\xE2"));
        assert!(s.advance(b"\x82"));
        assert!(s.advance(b"\xAC"));
        assert!(s.is_finished());
    }

    #[test]
    fn a_partial_character_is_checked_against_the_class() {
        let mut s = state("root ::= [a-z]+");
        assert!(!s.accepts(b"a\xC3"), "no letter of a-z starts with C3");
        let mut s = state("root ::= [^\"]+");
        assert!(s.accepts(b"a\xC3") && s.accepts(b"\xE4\xB8"));
        assert!(!s.accepts(b"\x80"), "a continuation byte cannot lead");
        assert!(!s.accepts(b"\xC3a"), "a character cut short is malformed");
        for bad in [
            &b"\xC0\x80"[..],
            b"\xE0\x80",
            b"\xED\xA0",
            b"\xF4\x90",
            b"\xF8",
            b"\xFF",
        ] {
            assert!(!s.accepts(bad), "{bad:?} is not UTF-8");
        }
        assert!(s.accepts(b"\xF0\x9F\x98\x80") && s.accepts(b"\xED\x9F\xBF"));
    }

    #[test]
    fn a_token_may_span_several_elements() {
        let mut s = state("root ::= \"{\" ws \"\\\"k\\\"\" ws \":\" [0-9]+ \"}\"\nws ::= [ ]*");
        assert!(s.accepts(b"{ \"k\":"));
        assert!(s.advance(b"{\"k\" :12}"));
        assert!(s.is_finished());
    }

    #[test]
    fn a_run_of_pieces_stops_at_the_first_refused() {
        let mut s = state("root ::= \"ab\" \"c\"*");
        let run = |s: &mut GrammarState, p: &[Option<&[u8]>]| s.accepted_run(p.iter().copied());
        assert_eq!(
            run(&mut s, &[Some(b"a"), Some(b"bc"), Some(b"x"), Some(b"c")]),
            2
        );
        assert_eq!(run(&mut s, &[Some(b"ab"), None, Some(b"c")]), 2);
        assert_eq!(run(&mut s, &[Some(b"a"), None]), 1);
        assert!(
            s.accepts(b"a") && !s.accepts(b"c"),
            "the state did not move"
        );
    }

    #[test]
    fn nul_ends_a_tokens_text() {
        let mut s = state("root ::= \"a\"");
        assert!(!s.accepts(b"\0a"));
        assert!(s.accepts(b"a\0zz"));
    }
}
