//! The model's tokens as a grammar sees them: each token's bytes (llama.cpp's token piece:
//! a control token's own text, a byte token's byte) in a prefix trie built once per model.
//! Masking walks the trie once with the grammar's stacks: a shared prefix is read once for all
//! the tokens that start with it, and a prefix the grammar refuses cuts off its whole subtree.

use super::matcher::{may_end_token, step_interned, GrammarState, Partial};
use crate::tokenizer::Tokenizer;

/// One trie node: the tokens whose bytes end here and the children, contiguous in the node
/// array (the trie is laid out breadth first).
#[derive(Clone, Copy, Debug)]
struct Node {
    byte: u8,
    first_child: u32,
    n_children: u32,
    /// Range of `sorted` holding the tokens that end at this node.
    tokens: (u32, u32),
}

pub struct GrammarVocab {
    pieces: Vec<u8>,
    /// Token `i`'s bytes are `pieces[offsets[i]..offsets[i + 1]]`.
    offsets: Vec<u32>,
    nodes: Vec<Node>,
    /// Token ids in byte order of their pieces; trie nodes point into it.
    sorted: Vec<u32>,
    end_ids: Vec<u32>,
}

impl std::fmt::Debug for GrammarVocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarVocab")
            .field("tokens", &(self.offsets.len() - 1))
            .field("trie_nodes", &self.nodes.len())
            .finish()
    }
}

impl GrammarVocab {
    /// The vocabulary of `tokenizer`; its end-of-generation tokens are matched by whether the
    /// grammar may end, never by their text.
    pub fn new(tokenizer: &Tokenizer) -> GrammarVocab {
        let pieces = (0..tokenizer.vocab_size() as u32).map(|id| tokenizer.token_bytes(id));
        GrammarVocab::from_pieces(pieces, tokenizer.end_of_generation_ids())
    }

    /// A vocabulary of these token pieces (ids in order), `end_ids` ending a reply.
    pub fn from_pieces(pieces: impl IntoIterator<Item = Vec<u8>>, end_ids: Vec<u32>) -> Self {
        let mut all = Vec::new();
        let mut offsets = vec![0u32];
        for p in pieces {
            // llama.cpp reads a piece as a C string: nothing from a NUL on.
            let len = p.iter().position(|&b| b == 0).unwrap_or(p.len());
            all.extend_from_slice(&p[..len]);
            offsets.push(all.len() as u32);
        }
        let mut v = GrammarVocab {
            pieces: all,
            offsets,
            nodes: Vec::new(),
            sorted: Vec::new(),
            end_ids,
        };
        v.build_trie();
        v
    }

    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of token `id` (empty outside the vocabulary).
    pub fn piece(&self, id: u32) -> &[u8] {
        let i = id as usize;
        match (self.offsets.get(i), self.offsets.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.pieces[a as usize..b as usize],
            _ => &[],
        }
    }

    pub fn end_ids(&self) -> &[u32] {
        &self.end_ids
    }

    pub fn is_end(&self, id: u32) -> bool {
        self.end_ids.contains(&id)
    }

    fn build_trie(&mut self) {
        // Empty pieces are never allowed, and end tokens go by the grammar's end.
        let mut sorted: Vec<u32> = (0..self.len() as u32)
            .filter(|&id| !self.piece(id).is_empty() && !self.is_end(id))
            .collect();
        sorted.sort_by(|&a, &b| self.piece(a).cmp(self.piece(b)));
        let mut nodes = vec![Node {
            byte: 0,
            first_child: 0,
            n_children: 0,
            tokens: (0, 0),
        }];
        // Breadth first: (node, range of `sorted` below it, depth).
        let mut queue = std::collections::VecDeque::from([(0usize, 0usize, sorted.len(), 0usize)]);
        while let Some((node, lo, hi, depth)) = queue.pop_front() {
            // Pieces exactly `depth` long end here; they sort before their extensions.
            let mut i = lo;
            while i < hi && self.piece(sorted[i]).len() == depth {
                i += 1;
            }
            nodes[node].tokens = (lo as u32, i as u32);
            nodes[node].first_child = nodes.len() as u32;
            while i < hi {
                let b = self.piece(sorted[i])[depth];
                let mut j = i;
                while j < hi && self.piece(sorted[j])[depth] == b {
                    j += 1;
                }
                queue.push_back((nodes.len(), i, j, depth + 1));
                nodes.push(Node {
                    byte: b,
                    first_child: 0,
                    n_children: 0,
                    tokens: (0, 0),
                });
                nodes[node].n_children += 1;
                i = j;
            }
        }
        self.nodes = nodes;
        self.sorted = sorted;
    }

    /// Marks in `allowed` (one flag per token, all reset first) every token the grammar
    /// accepts from `state`: end tokens when it may end, other tokens when their bytes may
    /// follow. Returns how many are allowed.
    pub fn allowed(&self, state: &mut GrammarState, allowed: &mut Vec<bool>) -> usize {
        allowed.clear();
        allowed.resize(self.len(), false);
        let mut count = 0;
        if state.can_end() {
            for &e in &self.end_ids {
                if let Some(a) = allowed.get_mut(e as usize) {
                    *a = true;
                    count += 1;
                }
            }
        }
        count + self.walk(state, allowed)
    }

    /// The depth-first walk over the trie, each node's stacks an interned set, so that a step
    /// taken before (the same stacks, the same character) is looked up, not recomputed.
    fn walk(&self, state: &mut GrammarState, allowed: &mut [bool]) -> usize {
        struct Frame {
            node: u32,
            set: u32,
            partial: Partial,
            next_child: u32,
        }
        let (g, arena, tr, stacks, partial) = state.parts();
        if stacks.is_empty() {
            return 0;
        }
        tr.trim();
        let mut frames = vec![Frame {
            node: 0,
            set: tr.intern(stacks),
            partial,
            next_child: 0,
        }];
        let mut count = 0;
        while let Some(f) = frames.last_mut() {
            let node = self.nodes[f.node as usize];
            if f.next_child == node.n_children {
                frames.pop();
                continue;
            }
            let child_id = node.first_child + f.next_child;
            f.next_child += 1;
            let child = self.nodes[child_id as usize];
            let Some((set, p)) = step_interned(g, arena, tr, f.set, f.partial, child.byte) else {
                continue;
            };
            let (lo, hi) = child.tokens;
            if lo < hi && may_end_token(g, arena, tr.set(set), p) {
                for &id in &self.sorted[lo as usize..hi as usize] {
                    allowed[id as usize] = true;
                    count += 1;
                }
            }
            if child.n_children > 0 {
                frames.push(Frame {
                    node: child_id,
                    set,
                    partial: p,
                    next_child: 0,
                });
            }
        }
        count
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::grammar::Grammar;

    fn vocab(pieces: &[&[u8]]) -> GrammarVocab {
        GrammarVocab::from_pieces(pieces.iter().map(|p| p.to_vec()), vec![0])
    }

    /// The trie walk agrees with testing each token on its own.
    fn check_walk(g: &str, v: &GrammarVocab, advance: &[&[u8]]) -> Vec<u32> {
        let mut s = GrammarState::new(Arc::new(Grammar::parse(g).unwrap()));
        for a in advance {
            assert!(s.advance(a));
        }
        let mut allowed = Vec::new();
        let n = v.allowed(&mut s, &mut allowed);
        let ids: Vec<u32> = (0..v.len() as u32)
            .filter(|&i| allowed[i as usize])
            .collect();
        assert_eq!(n, ids.len());
        for id in 1..v.len() as u32 {
            assert_eq!(
                allowed[id as usize],
                s.accepts(v.piece(id)),
                "token {id} {:?}",
                v.piece(id)
            );
        }
        ids
    }

    #[test]
    fn the_trie_walk_masks_like_token_by_token() {
        let v = vocab(&[
            b"</s>",
            b"a",
            b"ab",
            b"abc",
            b"b",
            b"\"",
            b" ",
            b"\xC3",
            b"\xA9",
            b"\xC3\xA9",
            b"\xE2\x82",
            b"ba",
            b"",
            b"\0x",
            b"1",
            b"12",
            b"1,",
            b",",
        ]);
        let g = "root ::= \"ab\" [^\"]* \"\\\"\"";
        assert_eq!(check_walk(g, &v, &[]), vec![1, 2, 3]);
        let after = check_walk(g, &v, &[b"ab"]);
        assert!(after.contains(&5) && after.contains(&9) && !after.contains(&8));
        let g = "root ::= [0-9]+ (\",\" [0-9]+)*";
        assert_eq!(check_walk(g, &v, &[b"1"]), vec![0, 14, 15, 16, 17]);
        check_walk("root ::= [\\u00e9]", &v, &[b"\xC3"]);
        // A branch inside a character is cut only where no character could follow.
        check_walk("root ::= [^\\u00c0-\\u00ff]+", &v, &[]);
        check_walk("root ::= [^\\u00e9]+", &v, &[]);
        check_walk("root ::= [\\u20ac] | \"a\"", &v, &[]);
    }
}
