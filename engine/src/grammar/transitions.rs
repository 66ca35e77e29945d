//! Remembered steps: which set of parse stacks a set becomes after a character. Masking walks
//! the vocabulary's trie, and inside a permissive stretch (a JSON string) every node at the same
//! depth holds the same stacks and reads a character the same way, so after the first token
//! the rest cost one lookup per byte instead of an advance of every stack.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use super::stacks::{Arena, PairHasher};
use super::Grammar;

/// Sets and steps kept before the table starts afresh (it is only a cache).
const MAX_SETS: usize = 1 << 16;
const MAX_STEPS: usize = 1 << 20;

/// Stack sets by id, and the steps between them.
#[derive(Clone, Default)]
pub struct Transitions {
    sets: Vec<Box<[u32]>>,
    ids: HashMap<Box<[u32]>, u32, BuildHasherDefault<PairHasher>>,
    steps: HashMap<(u32, u32), u32, BuildHasherDefault<PairHasher>>,
    scratch: Vec<u32>,
}

impl Transitions {
    /// The id of `set` (the same id for the same stacks in the same order).
    pub fn intern(&mut self, set: &[u32]) -> u32 {
        if let Some(&id) = self.ids.get(set) {
            return id;
        }
        let id = self.sets.len() as u32;
        self.sets.push(set.into());
        self.ids.insert(set.into(), id);
        id
    }

    pub fn set(&self, id: u32) -> &[u32] {
        &self.sets[id as usize]
    }

    /// The set `from` becomes after code point `c`, or `None` if nothing accepts it. A refused
    /// character is not remembered: finding that out is cheap (no stack moves), and most bytes
    /// are refused in most states, so remembering them would cost more than it saves.
    pub fn advance(&mut self, g: &Grammar, arena: &mut Arena, from: u32, c: u32) -> Option<u32> {
        if let Some(&to) = self.steps.get(&(from, c)) {
            return Some(to);
        }
        let mut out = std::mem::take(&mut self.scratch);
        arena.advance(g, &self.sets[from as usize], c, &mut out);
        let to = (!out.is_empty()).then(|| self.intern(&out));
        self.scratch = out;
        if let Some(to) = to {
            self.steps.insert((from, c), to);
        }
        to
    }

    /// Starts afresh when the table has grown past its caps; ids from before are void then.
    /// Returns whether it did.
    pub fn trim(&mut self) -> bool {
        if self.sets.len() > MAX_SETS || self.steps.len() > MAX_STEPS {
            self.clear();
            return true;
        }
        false
    }

    /// Forgets everything (the arena's ids changed).
    pub fn clear(&mut self) {
        self.sets.clear();
        self.ids.clear();
        self.steps.clear();
    }
}
