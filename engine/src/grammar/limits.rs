//! Caps on what a grammar may ask for: grammars come from users and files, so their size, the
//! nesting the parser recurses through and the parse stacks the matcher keeps are all bounded.

/// Longest grammar text read.
pub(crate) const MAX_GRAMMAR_BYTES: usize = 1 << 20;
/// Deepest nesting of parentheses.
pub(crate) const MAX_NESTING: usize = 64;
/// Largest count in a `{m,n}` repetition.
pub(crate) const MAX_REPEAT: u32 = 1000;
/// Most rules, named and generated (groups and repetitions make rules of their own).
pub(crate) const MAX_RULES: usize = 20_000;
/// Most elements of the compiled grammar.
pub(crate) const MAX_ELEMENTS: usize = 1 << 20;
/// Most parse stacks kept at once. An ambiguous grammar can multiply them with every
/// character; past the cap the extra parses are dropped, so what is generated still matches
/// the grammar, only fewer continuations may be allowed.
pub(crate) const MAX_STACKS: usize = 1024;
/// Most stacks visited while expanding rule references after one character.
pub(crate) const MAX_EXPANSION: usize = 1 << 16;
/// Stack nodes kept before the arena is compacted to what the current stacks use.
pub(crate) const MAX_ARENA: usize = 1 << 22;
