//! Reads GBNF text (llama.cpp's grammar format) into rules of alternatives of sequences, each
//! item remembering where it was written so that later errors can point at it.
//!
//! The syntax: `name ::= alternatives` per rule; `|` between alternatives; items are string
//! literals (`"..."`), character classes (`[a-z]`, `[^"\\]`), `.` (any character), rule names
//! and parenthesised groups, each optionally followed by `*`, `+`, `?`, `{m}`, `{m,}` or
//! `{m,n}`; `#` starts a comment to the end of the line. A rule ends at a newline outside
//! parentheses, except right after `::=` or `|`.

use super::limits::{MAX_GRAMMAR_BYTES, MAX_NESTING, MAX_REPEAT};
use crate::{EngineError, Result};

/// Line and column (both from 1, the column in characters) of a place in the grammar text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pos {
    pub line: usize,
    pub column: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Item {
    /// A string literal: these code points in order.
    Literal(Vec<u32>),
    /// A character class: inclusive code point ranges, or any code point outside them.
    Class {
        negated: bool,
        ranges: Vec<(u32, u32)>,
    },
    /// `.`: any one character.
    Any,
    Ref {
        name: String,
        at: Pos,
    },
    Group(Vec<Vec<Item>>),
    Repeat {
        item: Box<Item>,
        min: u32,
        max: Option<u32>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RuleDef {
    pub name: String,
    pub at: Pos,
    pub alternatives: Vec<Vec<Item>>,
}

/// Parses the whole grammar text into its rules, in order of definition.
pub(crate) fn parse(text: &str) -> Result<Vec<RuleDef>> {
    if text.len() > MAX_GRAMMAR_BYTES {
        return Err(EngineError::Grammar(format!(
            "grammar is {} bytes, more than the {MAX_GRAMMAR_BYTES} allowed",
            text.len()
        )));
    }
    let mut p = Parser {
        text,
        at: 0,
        depth: 0,
    };
    let mut rules = Vec::new();
    p.skip_space(true);
    while !p.done() {
        rules.push(p.rule()?);
        p.skip_space(true);
    }
    Ok(rules)
}

struct Parser<'t> {
    text: &'t str,
    /// Byte offset of the next character.
    at: usize,
    /// Open parentheses, capped so hostile input cannot overflow the stack.
    depth: usize,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

impl Parser<'_> {
    fn done(&self) -> bool {
        self.at >= self.text.len()
    }

    fn peek(&self) -> Option<char> {
        self.text[self.at..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.at += c.len_utf8();
        Some(c)
    }

    fn pos_of(&self, offset: usize) -> Pos {
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Pos {
            line,
            column: before[line_start..].chars().count() + 1,
        }
    }

    fn error_at(&self, offset: usize, what: &str) -> EngineError {
        let p = self.pos_of(offset);
        EngineError::Grammar(format!(
            "grammar line {}, column {}: {what}",
            p.line, p.column
        ))
    }

    fn error(&self, what: &str) -> EngineError {
        self.error_at(self.at, what)
    }

    /// Skips blanks and comments; newlines too when `newlines` (inside parentheses, after
    /// `::=` or `|`, between rules).
    fn skip_space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.at += 1,
                '\r' | '\n' if newlines => self.at += 1,
                '#' => {
                    let rest = &self.text[self.at..];
                    self.at += rest.find('\n').unwrap_or(rest.len());
                }
                _ => return,
            }
        }
    }

    fn name(&mut self) -> Option<String> {
        let start = self.at;
        while self.peek().is_some_and(is_name_char) {
            self.at += 1;
        }
        (self.at > start).then(|| self.text[start..self.at].to_string())
    }

    fn rule(&mut self) -> Result<RuleDef> {
        let start = self.at;
        let name = self
            .name()
            .ok_or_else(|| self.error("expected a rule name"))?;
        self.skip_space(false);
        if !self.text[self.at..].starts_with("::=") {
            return Err(self.error(&format!("expected '::=' after the rule name '{name}'")));
        }
        self.at += 3;
        self.skip_space(true);
        let alternatives = self.alternatives(false)?;
        self.skip_space(false);
        match self.peek() {
            None | Some('\n') | Some('\r') => {}
            Some(c) => {
                return Err(self.error(&format!(
                    "unexpected '{c}': expected a newline or the end of the grammar after rule '{name}'"
                )))
            }
        }
        Ok(RuleDef {
            name,
            at: self.pos_of(start),
            alternatives,
        })
    }

    /// Sequences separated by `|`. `nested`: inside parentheses, where newlines are blanks.
    fn alternatives(&mut self, nested: bool) -> Result<Vec<Vec<Item>>> {
        let mut alts = vec![self.sequence(nested)?];
        while self.peek() == Some('|') {
            self.at += 1;
            self.skip_space(true);
            alts.push(self.sequence(nested)?);
        }
        Ok(alts)
    }

    fn sequence(&mut self, nested: bool) -> Result<Vec<Item>> {
        let mut items: Vec<Item> = Vec::new();
        loop {
            self.skip_space(nested);
            let start = self.at;
            let Some(c) = self.peek() else { break };
            let item = match c {
                '"' => self.literal()?,
                '[' => self.class()?,
                '.' => {
                    self.at += 1;
                    Item::Any
                }
                '(' => self.group()?,
                '*' | '+' | '?' | '{' => {
                    let last = items.pop().ok_or_else(|| {
                        self.error(&format!("'{c}' must follow something to repeat"))
                    })?;
                    self.repetition(last)?
                }
                c if is_name_char(c) => {
                    let at = self.pos_of(start);
                    let name = self.name().unwrap_or_default();
                    Item::Ref { name, at }
                }
                _ => break,
            };
            items.push(item);
        }
        Ok(items)
    }

    fn group(&mut self) -> Result<Item> {
        let open = self.at;
        self.at += 1;
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(self.error(&format!("parentheses nested more than {MAX_NESTING} deep")));
        }
        self.skip_space(true);
        let alts = self.alternatives(true)?;
        self.skip_space(true);
        if self.peek() != Some(')') {
            let what = match self.peek() {
                Some(c) => format!(
                    "expected ')' to close the group opened at {}, found '{c}'",
                    self.place(open)
                ),
                None => format!(
                    "expected ')' to close the group opened at {}",
                    self.place(open)
                ),
            };
            return Err(self.error(&what));
        }
        self.at += 1;
        self.depth -= 1;
        Ok(Item::Group(alts))
    }

    fn place(&self, offset: usize) -> String {
        let p = self.pos_of(offset);
        format!("line {}, column {}", p.line, p.column)
    }

    fn repetition(&mut self, item: Item) -> Result<Item> {
        let op = self.at;
        let (min, max) = match self.bump() {
            Some('*') => (0, None),
            Some('+') => (1, None),
            Some('?') => (0, Some(1)),
            _ => self.braces(op)?,
        };
        Ok(Item::Repeat {
            item: Box::new(item),
            min,
            max,
        })
    }

    /// `{m}`, `{m,}` or `{m,n}`, the `{` already read.
    fn braces(&mut self, open: usize) -> Result<(u32, Option<u32>)> {
        self.skip_space(false);
        let min = self
            .count()?
            .ok_or_else(|| self.error("expected a number after '{'"))?;
        self.skip_space(false);
        let max = match self.peek() {
            Some('}') => Some(min),
            Some(',') => {
                self.at += 1;
                self.skip_space(false);
                self.count()?
            }
            _ => return Err(self.error("expected ',' or '}' in the repetition")),
        };
        self.skip_space(false);
        if self.peek() != Some('}') {
            return Err(self.error("expected '}' to close the repetition"));
        }
        self.at += 1;
        if let Some(max) = max {
            if max < min {
                return Err(self.error_at(
                    open,
                    &format!("repetition {{{min},{max}}} has its maximum below its minimum"),
                ));
            }
        }
        Ok((min, max))
    }

    fn count(&mut self) -> Result<Option<u32>> {
        let start = self.at;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.at += 1;
        }
        if self.at == start {
            return Ok(None);
        }
        match self.text[start..self.at].parse::<u32>() {
            Ok(n) if n <= MAX_REPEAT => Ok(Some(n)),
            _ => Err(self.error_at(
                start,
                &format!("repetition count above the {MAX_REPEAT} allowed"),
            )),
        }
    }

    fn literal(&mut self) -> Result<Item> {
        let open = self.at;
        self.at += 1;
        let mut chars = Vec::new();
        loop {
            match self.peek() {
                None | Some('\n') | Some('\r') => {
                    return Err(self.error(&format!(
                        "expected '\"' to close the string opened at {}",
                        self.place(open)
                    )))
                }
                Some('"') => {
                    self.at += 1;
                    return Ok(Item::Literal(chars));
                }
                Some(_) => chars.push(self.char_in(false)?),
            }
        }
    }

    fn class(&mut self) -> Result<Item> {
        let open = self.at;
        self.at += 1;
        let negated = self.peek() == Some('^');
        if negated {
            self.at += 1;
        }
        let mut ranges = Vec::new();
        loop {
            match self.peek() {
                None | Some('\n') | Some('\r') => {
                    return Err(self.error(&format!(
                        "expected ']' to close the character class opened at {}",
                        self.place(open)
                    )))
                }
                Some(']') => {
                    self.at += 1;
                    return Ok(Item::Class { negated, ranges });
                }
                Some(_) => {
                    let lo_at = self.at;
                    let lo = self.char_in(true)?;
                    let rest = &self.text[self.at..];
                    let hi = if rest.starts_with('-') && !rest.starts_with("-]") {
                        self.at += 1;
                        if matches!(self.peek(), None | Some('\n') | Some('\r')) {
                            continue;
                        }
                        self.char_in(true)?
                    } else {
                        lo
                    };
                    if hi < lo {
                        return Err(
                            self.error_at(lo_at, "character range ends below where it starts")
                        );
                    }
                    ranges.push((lo, hi));
                }
            }
        }
    }

    /// One character of a literal or class, escapes decoded.
    fn char_in(&mut self, in_class: bool) -> Result<u32> {
        let start = self.at;
        let c = self.bump().ok_or_else(|| self.error("unexpected end"))?;
        if c != '\\' {
            return Ok(c as u32);
        }
        let e = self
            .bump()
            .ok_or_else(|| self.error("unfinished escape at the end"))?;
        let code = match e {
            'n' => '\n' as u32,
            't' => '\t' as u32,
            'r' => '\r' as u32,
            '\\' | '"' | '[' | ']' => e as u32,
            '-' | '^' if in_class => e as u32,
            'x' => self.hex(2, start)?,
            'u' => self.hex(4, start)?,
            'U' => self.hex(8, start)?,
            other => {
                return Err(self.error_at(start, &format!("unknown escape '\\{other}'")));
            }
        };
        Ok(code)
    }

    fn hex(&mut self, digits: usize, start: usize) -> Result<u32> {
        let rest = &self.text[self.at..];
        let hex: String = rest.chars().take(digits).collect();
        if hex.len() != digits || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(self.error_at(start, &format!("escape needs {digits} hexadecimal digits")));
        }
        self.at += digits;
        let v = u32::from_str_radix(&hex, 16).unwrap_or(u32::MAX);
        if v > 0x10FFFF {
            return Err(self.error_at(start, "escape is past the last code point U+10FFFF"));
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn reads_every_construct() {
        let g = parse(
            "# a comment\nroot ::= \"a\\n\\t\\\"\\\\\\x41\\u00e9\\U0001F600\" [^a-z0-9\\]] . x* x+ x? x{2} x{2,} x{2,3} (x | \"y\")\nx ::= \"x\" # trailing\n",
        )
        .unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].name, "root");
        let items = &g[0].alternatives[0];
        assert_eq!(
            items[0],
            Item::Literal(vec![
                'a' as u32,
                10,
                9,
                '"' as u32,
                '\\' as u32,
                0x41,
                0xE9,
                0x1F600
            ])
        );
        assert_eq!(
            items[1],
            Item::Class {
                negated: true,
                ranges: vec![('a' as u32, 'z' as u32), ('0' as u32, '9' as u32), (93, 93)]
            }
        );
        assert_eq!(items[2], Item::Any);
        let reps: Vec<(u32, Option<u32>)> = items[3..9]
            .iter()
            .map(|i| match i {
                Item::Repeat { min, max, .. } => (*min, *max),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            reps,
            [
                (0, None),
                (1, None),
                (0, Some(1)),
                (2, Some(2)),
                (2, None),
                (2, Some(3))
            ]
        );
        assert!(matches!(&items[9], Item::Group(a) if a.len() == 2));
        assert_eq!(g[1].at, Pos { line: 3, column: 1 });
    }

    #[test]
    fn newlines_continue_after_bars_and_inside_groups() {
        let g = parse("root ::=\n  \"a\" |\n  ( \"b\"\n  \"c\" )\n").unwrap();
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].alternatives.len(), 2);
    }

    #[test]
    fn errors_carry_line_and_column() {
        assert_eq!(
            err("root ::= \"a\"\nx ::= [abc\n"),
            "grammar line 2, column 11: expected ']' to close the character class opened at line 2, column 7"
        );
        assert_eq!(
            err("root ::= \"abc"),
            "grammar line 1, column 14: expected '\"' to close the string opened at line 1, column 10"
        );
        assert_eq!(
            err("root ::= (\"a\" | \"b\""),
            "grammar line 1, column 20: expected ')' to close the group opened at line 1, column 10"
        );
        assert_eq!(
            err("root = \"a\""),
            "grammar line 1, column 6: expected '::=' after the rule name 'root'"
        );
        assert_eq!(
            err("root ::= * \"a\""),
            "grammar line 1, column 10: '*' must follow something to repeat"
        );
        assert_eq!(
            err("root ::= \"\\q\""),
            "grammar line 1, column 11: unknown escape '\\q'"
        );
        assert_eq!(
            err("root ::= \"\\x4\""),
            "grammar line 1, column 11: escape needs 2 hexadecimal digits"
        );
        assert_eq!(
            err("root ::= \"a\"{3,2}"),
            "grammar line 1, column 13: repetition {3,2} has its maximum below its minimum"
        );
        assert_eq!(
            err("root ::= \"a\"{2000}"),
            "grammar line 1, column 14: repetition count above the 1000 allowed"
        );
        assert_eq!(
            err("root ::= \"a\"{x}"),
            "grammar line 1, column 14: expected a number after '{'"
        );
        assert_eq!(
            err("root ::= [z-a]"),
            "grammar line 1, column 11: character range ends below where it starts"
        );
        assert_eq!(
            err("root ::= \"a\" )"),
            "grammar line 1, column 14: unexpected ')': expected a newline or the end of the grammar after rule 'root'"
        );
        assert_eq!(
            err("::= \"a\""),
            "grammar line 1, column 1: expected a rule name"
        );
    }

    #[test]
    fn hostile_nesting_is_refused_not_overflowed() {
        let deep = format!(
            "root ::= {}\"a\"{}",
            "(".repeat(100_000),
            ")".repeat(100_000)
        );
        assert!(err(&deep).contains("nested more than"));
    }
}
