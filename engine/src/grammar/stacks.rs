//! Parse stacks: where in the grammar the text read so far may stand. A stack is a path of
//! element positions, its top the character class to match next; rule references on top are
//! always expanded away. Stacks share their tails in an arena of interned nodes, so pushing is
//! one hash lookup, equal stacks have equal ids (a set deduplicates by id), and advancing many
//! stacks by one character copies nothing.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::limits::{MAX_ARENA, MAX_EXPANSION, MAX_STACKS};
use super::{Elem, Grammar};

/// The empty stack: the grammar has matched a whole sentence.
pub const DONE: u32 = u32::MAX;

/// A multiplicative hash for the arena's (position, parent) keys: the default SipHash costs
/// more than the rest of a push.
#[derive(Default)]
pub(crate) struct PairHasher(u64);

impl Hasher for PairHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(26) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Interned stack nodes: node `i` is (element position on top, rest of the stack).
#[derive(Clone, Default)]
pub struct Arena {
    nodes: Vec<(u32, u32)>,
    index: HashMap<(u32, u32), u32, BuildHasherDefault<PairHasher>>,
    /// Visit marks for one expansion, stamped with `stamp` so they need no clearing.
    marks: Vec<u32>,
    stamp: u32,
    work: Vec<u32>,
}

impl Arena {
    /// The stack `parent` with `pos` pushed on top.
    fn push(&mut self, pos: u32, parent: u32) -> u32 {
        let next = self.nodes.len() as u32;
        let id = *self.index.entry((pos, parent)).or_insert(next);
        if id == next {
            self.nodes.push((pos, parent));
        }
        id
    }

    /// The element position on top of stack `s` (not [`DONE`]).
    pub fn top(&self, s: u32) -> u32 {
        self.nodes[s as usize].0
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The stacks at the start of `g`: its root rule's alternatives, expanded.
    pub fn initial(&mut self, g: &Grammar, out: &mut Vec<u32>) {
        out.clear();
        self.begin_expansion();
        let root = g.rule_start[g.root as usize];
        self.expand_alternatives(g, root as usize, DONE);
        self.finish_expansion(g, out);
    }

    /// Advances every stack of `from` whose top accepts code point `c`, into `out` (cleared
    /// first). Empty when no stack accepts it.
    pub fn advance(&mut self, g: &Grammar, from: &[u32], c: u32, out: &mut Vec<u32>) {
        out.clear();
        self.begin_expansion();
        for &s in from {
            if s == DONE {
                continue;
            }
            let (pos, parent) = self.nodes[s as usize];
            if g.match_char(pos as usize, c) {
                let next = g.after(pos as usize);
                let rest = self.continue_with(g, next, parent);
                self.work.push(rest);
            }
        }
        self.finish_expansion(g, out);
    }

    /// `parent` with `next` pushed, unless `next` ends its alternative.
    fn continue_with(&mut self, g: &Grammar, next: usize, parent: u32) -> u32 {
        if g.elems[next].ends_alternative() {
            parent
        } else {
            self.push(next as u32, parent)
        }
    }

    /// Pushes, for each alternative of the rule whose elements start at `start`, the stack
    /// `parent` with that alternative's first element on top.
    fn expand_alternatives(&mut self, g: &Grammar, start: usize, parent: u32) {
        let mut p = start;
        loop {
            let s = self.continue_with(g, p, parent);
            self.work.push(s);
            // Skip to the next alternative.
            while !g.elems[p].ends_alternative() {
                p += 1;
            }
            if g.elems[p] == Elem::End {
                return;
            }
            p += 1;
        }
    }

    fn begin_expansion(&mut self) {
        self.work.clear();
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.marks.iter_mut().for_each(|m| *m = 0);
            self.stamp = 1;
        }
    }

    /// Expands the stacks on the work list until each has a character class on top (or is
    /// [`DONE`]), into `out`, each distinct stack once, at most [`MAX_STACKS`] of them.
    fn finish_expansion(&mut self, g: &Grammar, out: &mut Vec<u32>) {
        let mut done_seen = false;
        let mut visited = 0usize;
        while let Some(s) = self.work.pop() {
            if s == DONE {
                if !done_seen && out.len() < MAX_STACKS {
                    done_seen = true;
                    out.push(DONE);
                }
                continue;
            }
            if self.marks.len() < self.nodes.len() {
                self.marks.resize(self.nodes.len(), 0);
            }
            if self.marks[s as usize] == self.stamp {
                continue;
            }
            self.marks[s as usize] = self.stamp;
            visited += 1;
            if visited > MAX_EXPANSION {
                break;
            }
            let (pos, parent) = self.nodes[s as usize];
            match g.elems[pos as usize] {
                Elem::RuleRef(r) => {
                    let rest = self.continue_with(g, pos as usize + 1, parent);
                    let start = g.rule_start[r as usize] as usize;
                    self.expand_alternatives(g, start, rest);
                }
                _ if out.len() < MAX_STACKS => out.push(s),
                _ => {}
            }
        }
        self.work.clear();
    }

    /// Whether the arena has grown past its cap and should be rebuilt around the live stacks.
    pub fn wants_compaction(&self) -> bool {
        self.nodes.len() > MAX_ARENA
    }

    /// Rebuilds the arena holding only `stacks`, rewriting their ids.
    pub fn compact(&mut self, stacks: &mut [u32]) {
        let old = std::mem::take(self);
        let mut path = Vec::new();
        for s in stacks.iter_mut() {
            if *s == DONE {
                continue;
            }
            path.clear();
            let mut n = *s;
            while n != DONE {
                let (pos, parent) = old.nodes[n as usize];
                path.push(pos);
                n = parent;
            }
            let mut id = DONE;
            for &pos in path.iter().rev() {
                id = self.push(pos, id);
            }
            *s = id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stacks_after(g: &Grammar, text: &str) -> Vec<u32> {
        let mut a = Arena::default();
        let mut cur = Vec::new();
        a.initial(g, &mut cur);
        let mut next = Vec::new();
        for c in text.chars() {
            a.advance(g, &cur, c as u32, &mut next);
            std::mem::swap(&mut cur, &mut next);
        }
        cur
    }

    #[test]
    fn a_sentence_ends_in_the_empty_stack() {
        let g = Grammar::parse("root ::= \"ab\" | \"a\" [0-9]+").unwrap();
        assert!(!stacks_after(&g, "a").contains(&DONE));
        assert_eq!(stacks_after(&g, "ab"), vec![DONE]);
        assert!(stacks_after(&g, "a12").contains(&DONE));
        assert!(stacks_after(&g, "ax").is_empty());
    }

    #[test]
    fn ambiguity_is_bounded() {
        // Every "a" doubles the parses; the set stays capped and the work bounded.
        let g = Grammar::parse("root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"\"").unwrap();
        let s = stacks_after(&g, &"a".repeat(40));
        assert!(!s.is_empty() && s.len() <= MAX_STACKS, "{}", s.len());
    }

    #[test]
    fn compaction_keeps_the_stacks() {
        let g = Grammar::parse("root ::= (\"a\" | \"b\")* \"c\"").unwrap();
        let mut a = Arena::default();
        let mut cur = Vec::new();
        a.initial(&g, &mut cur);
        let mut next = Vec::new();
        a.advance(&g, &cur, 'a' as u32, &mut next);
        a.compact(&mut next);
        a.advance(&g, &next, 'c' as u32, &mut cur);
        assert_eq!(cur, vec![DONE]);
    }
}
