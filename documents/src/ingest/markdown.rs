//! Markdown (CommonMark's block structure, read tolerantly): ATX and setext headings,
//! paragraphs, lists, block quotes, fenced and indented code, pipe tables. Inline markup is
//! reduced to its text: emphasis marks dropped, links and images to their words.

use super::{Section, SectionBuilder, SectionKind};

pub(super) fn parse(text: &str) -> Vec<Section> {
    let mut p = Parser {
        b: SectionBuilder::default(),
        current: String::new(),
        kind: SectionKind::Paragraph,
        in_list: false,
        fence: None,
    };
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let raw = lines[i];
        let line = raw.trim_end();
        i += 1;
        // Inside a fence everything is code until the closing fence.
        if let Some((fence, code)) = p.fence.as_mut() {
            if is_fence_close(line, *fence) {
                let code = std::mem::take(code);
                p.fence = None;
                p.b.code(&code);
            } else {
                code.push_str(raw);
                code.push('\n');
            }
            continue;
        }
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.is_empty() {
            p.flush();
            continue;
        }
        if let Some(fence) = fence_open(trimmed) {
            p.flush();
            p.fence = Some((fence, String::new()));
            continue;
        }
        // Indented code: four spaces after a blank line, outside a list item.
        if indent >= 4 && p.current.is_empty() && !p.in_list {
            let mut code = String::new();
            i -= 1;
            while i < lines.len() && (lines[i].starts_with("    ") || lines[i].trim().is_empty()) {
                code.push_str(lines[i].get(4..).unwrap_or(""));
                code.push('\n');
                i += 1;
            }
            p.b.code(&code);
            continue;
        }
        if let Some((level, title)) = atx_heading(trimmed) {
            p.flush();
            p.b.heading(level, &inline_text(title));
            continue;
        }
        // Setext: a paragraph line underlined by === (level 1) or --- (level 2).
        if !p.current.is_empty() && p.kind == SectionKind::Paragraph && indent < 4 {
            let level = if is_underline(trimmed, '=') {
                Some(1)
            } else if is_underline(trimmed, '-') {
                Some(2)
            } else {
                None
            };
            if let Some(level) = level {
                let title = std::mem::take(&mut p.current);
                p.b.heading(level, &inline_text(&title));
                continue;
            }
        }
        if is_thematic_break(trimmed) {
            p.flush();
            continue;
        }
        if trimmed.starts_with('|') || (trimmed.contains(" | ") && p.kind == SectionKind::TableRow)
        {
            p.flush();
            if !is_table_separator(trimmed) {
                let cells: Vec<String> = trimmed
                    .trim_matches('|')
                    .split('|')
                    .map(|c| inline_text(c.trim()))
                    .collect();
                p.b.block(SectionKind::TableRow, &cells.join(" | "));
            }
            p.kind = SectionKind::TableRow;
            continue;
        }
        let unquoted = strip_quote(trimmed);
        // Inside a paragraph, only a bullet or an ordered item numbered 1 with text starts a
        // list (CommonMark): a wrapped line that begins "1711. A boiling house" is prose.
        let in_paragraph = !p.current.is_empty() && p.kind == SectionKind::Paragraph;
        let item = list_item(unquoted).filter(|(text, number)| {
            !in_paragraph || (number.is_none_or(|n| n == 1) && !text.trim().is_empty())
        });
        if let Some((item, _)) = item {
            p.flush();
            p.in_list = true;
            p.kind = SectionKind::ListItem;
            p.current.push_str(item);
            p.current.push('\n');
            continue;
        }
        if p.current.is_empty() {
            // A line after a blank line that is not indented ends the list.
            if indent == 0 {
                p.in_list = false;
            }
            if !p.in_list {
                p.kind = SectionKind::Paragraph;
            }
        }
        p.current.push_str(unquoted);
        p.current.push('\n');
    }
    if let Some((_, code)) = p.fence.take() {
        // An unclosed fence runs to the end of the file (as CommonMark reads it).
        p.b.code(&code);
    }
    p.flush();
    p.b.finish()
}

struct Parser {
    b: SectionBuilder,
    /// The block being gathered, raw lines.
    current: String,
    kind: SectionKind,
    in_list: bool,
    /// An open code fence: its marker and the code so far.
    fence: Option<((char, usize), String)>,
}

impl Parser {
    fn flush(&mut self) {
        if !self.current.is_empty() {
            let text = inline_text(&self.current);
            self.b.block(self.kind, &text);
            self.current.clear();
        }
        self.kind = SectionKind::Paragraph;
    }
}

fn atx_heading(line: &str) -> Option<(u8, &str)> {
    let hashes = line.bytes().take_while(|&c| c == b'#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &line[hashes..];
    if !rest.is_empty() && !rest.starts_with([' ', '\t']) {
        return None;
    }
    // A closing run of #s is not part of the title.
    let title = rest.trim().trim_end_matches('#').trim_end();
    Some((hashes as u8, title))
}

fn is_underline(line: &str, c: char) -> bool {
    !line.is_empty() && line.chars().all(|x| x == c)
}

fn is_thematic_break(line: &str) -> bool {
    let marks: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    marks.len() >= 3
        && ['-', '*', '_']
            .iter()
            .any(|&m| marks.chars().all(|c| c == m))
}

fn fence_open(line: &str) -> Option<(char, usize)> {
    let c = line.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let n = line.chars().take_while(|&x| x == c).count();
    (n >= 3).then_some((c, n))
}

fn is_fence_close(line: &str, (c, n): (char, usize)) -> bool {
    let t = line.trim();
    t.chars().take_while(|&x| x == c).count() >= n && t.chars().all(|x| x == c)
}

fn is_table_separator(line: &str) -> bool {
    line.chars()
        .all(|c| matches!(c, '|' | '-' | ':' | ' ' | '\t'))
        && line.contains('-')
}

fn strip_quote(mut line: &str) -> &str {
    while let Some(rest) = line.strip_prefix('>') {
        line = rest.trim_start();
    }
    line
}

/// If `line` starts a list item ("- ", "* ", "+ ", "1. ", "1) "): the item's text and, for an
/// ordered item, its number. A bullet is dropped; an ordered item keeps its number in the
/// text, since "step 3" may be what a question asks about.
fn list_item(line: &str) -> Option<(&str, Option<u64>)> {
    for marker in ["- ", "* ", "+ "] {
        if let Some(rest) = line.strip_prefix(marker) {
            return Some((rest, None));
        }
    }
    let digits = line.bytes().take_while(u8::is_ascii_digit).count();
    if (1..=9).contains(&digits) {
        let rest = &line[digits..];
        if let Some(text) = rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")) {
            return (!text.is_empty()).then(|| (line, line[..digits].parse().ok()));
        }
    }
    None
}

/// How far a closing mark (backticks, `]`, `)`, `>`) is looked for, in characters.
const INLINE_WINDOW: usize = 2_000;

/// Inline Markdown reduced to its words: `code` keeps its text, *emphasis* and _emphasis_
/// lose their marks, [links](url) and ![images](src) keep their words, <autolinks> their
/// address, backslash escapes their character.
fn inline_text(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    // Looking ahead for closing marks may examine a few characters per character of text in
    // all; past that, marks read as text. This keeps hostile input (a paragraph of ten
    // million `[`) linear.
    let mut budget = 4 * chars.len() + 4 * INLINE_WINDOW;
    inline_into(&chars, &mut out, &mut budget);
    out
}

/// How far a scan from `from` may look: the window, the budget and the text's end.
fn scan_limit(chars: &[char], from: usize, budget: &mut usize) -> usize {
    let n = INLINE_WINDOW
        .min(*budget)
        .min(chars.len().saturating_sub(from));
    *budget -= n;
    from + n
}

fn inline_into(chars: &[char], out: &mut String, budget: &mut usize) {
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' if i + 1 < chars.len() && chars[i + 1].is_ascii_punctuation() => {
                out.push(chars[i + 1]);
                i += 2;
            }
            '`' => {
                let run = chars[i..].iter().take_while(|&&x| x == '`').count();
                // Find the closing run of the same length.
                let mut j = i + run;
                let mut close = None;
                let limit = scan_limit(chars, j, budget);
                while j < limit {
                    if chars[j] == '`' {
                        let r = chars[j..].iter().take_while(|&&x| x == '`').count();
                        if r == run {
                            close = Some(j);
                            break;
                        }
                        j += r;
                    } else {
                        j += 1;
                    }
                }
                match close {
                    Some(j) => {
                        out.extend(&chars[i + run..j]);
                        i = j + run;
                    }
                    None => {
                        out.extend(&chars[i..i + run]);
                        i += run;
                    }
                }
            }
            '*' | '_' => {
                // Emphasis marks go; an underscore inside a word (snake_case) stays.
                let inside_word = c == '_'
                    && i > 0
                    && chars[i - 1].is_alphanumeric()
                    && chars.get(i + 1).is_some_and(|n| n.is_alphanumeric());
                if inside_word {
                    out.push(c);
                }
                i += 1;
            }
            '!' if chars.get(i + 1) == Some(&'[') => i += 1,
            '[' => match link_end(chars, i, budget) {
                Some((label_end, end)) => {
                    inline_into(&chars[i + 1..label_end], out, budget);
                    i = end;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            },
            '<' => {
                let limit = scan_limit(chars, i + 1, budget);
                let close = chars[i + 1..limit].iter().position(|&x| x == '>');
                match close {
                    Some(n)
                        if chars[i + 1..i + 1 + n]
                            .iter()
                            .any(|&x| x == ':' || x == '@')
                            && !chars[i + 1..i + 1 + n].iter().any(|x| x.is_whitespace()) =>
                    {
                        out.extend(&chars[i + 1..i + 1 + n]);
                        i += n + 2;
                    }
                    _ => {
                        out.push(c);
                        i += 1;
                    }
                }
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
}

/// For a `[label](target)` or `[label][ref]` starting at `start`: where the label ends and
/// where the whole link ends.
fn link_end(chars: &[char], start: usize, budget: &mut usize) -> Option<(usize, usize)> {
    let mut depth = 0usize;
    let mut label_end = None;
    let limit = scan_limit(chars, start, budget);
    for (k, &c) in chars.iter().enumerate().take(limit).skip(start) {
        match c {
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    label_end = Some(k);
                    break;
                }
            }
            _ => {}
        }
    }
    let label_end = label_end?;
    let close = match chars.get(label_end + 1) {
        Some('(') => ')',
        Some('[') => ']',
        _ => return None,
    };
    let from = label_end + 2;
    let limit = scan_limit(chars, from, budget);
    let n = chars.get(from..limit)?.iter().position(|&x| x == close)?;
    Some((label_end, label_end + 2 + n + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds_and_texts(s: &[Section]) -> Vec<(SectionKind, &str)> {
        s.iter().map(|s| (s.kind, s.text.as_str())).collect()
    }

    #[test]
    fn blocks_and_headings_are_read() {
        let md = "# Setup\n\nSome *intro* text\nover two lines.\n\n## Install\n\n- first `step`\n- second [link](http://x.y)\n  continued\n\n```sh\ncargo  run\n  --release\n```\n\nUse\n===\n\nA | B\n\n| a | b |\n|---|---|\n| 1 | 2 |\n";
        let s = parse(md);
        assert_eq!(
            kinds_and_texts(&s),
            [
                (SectionKind::Heading(1), "Setup"),
                (SectionKind::Paragraph, "Some intro text over two lines."),
                (SectionKind::Heading(2), "Install"),
                (SectionKind::ListItem, "first step"),
                (SectionKind::ListItem, "second link continued"),
                (SectionKind::Code, "cargo  run\n  --release"),
                (SectionKind::Heading(1), "Use"),
                (SectionKind::Paragraph, "A | B"),
                (SectionKind::TableRow, "a | b"),
                (SectionKind::TableRow, "1 | 2"),
            ]
        );
        assert_eq!(s[4].place.heading.as_deref(), Some("Setup › Install"));
        assert_eq!(s[8].place.heading.as_deref(), Some("Use"));
    }

    #[test]
    fn a_wrapped_line_starting_with_a_number_stays_in_its_paragraph() {
        let s = parse("The mill burned in\n1711. A boiling house\nstood there.\n\n1. Check it.\n2. Restart it.\n\nText\n1. Interrupts.");
        assert_eq!(
            kinds_and_texts(&s),
            [
                (
                    SectionKind::Paragraph,
                    "The mill burned in 1711. A boiling house stood there."
                ),
                (SectionKind::ListItem, "1. Check it."),
                (SectionKind::ListItem, "2. Restart it."),
                (SectionKind::Paragraph, "Text"),
                (SectionKind::ListItem, "1. Interrupts."),
            ]
        );
    }

    #[test]
    fn setext_level_two_and_thematic_breaks() {
        let s = parse("Title\n-----\n\ntext\n\n---\n\nmore snake_case \\*stars\\*");
        assert_eq!(
            kinds_and_texts(&s),
            [
                (SectionKind::Heading(2), "Title"),
                (SectionKind::Paragraph, "text"),
                (SectionKind::Paragraph, "more snake_case *stars*"),
            ]
        );
    }

    #[test]
    fn unclosed_markup_never_panics() {
        for md in [
            "[", "[a](", "`", "```", "![x", "<", "<a:", "# ", "#######", "1.", "> > >", "[[[[]]",
        ] {
            let _ = parse(md);
        }
        // Linear on marks that never close: a million of each reads in well under a second.
        for mark in ["[", "`a", "<", "[a]", "![", "[[]"] {
            let text = mark.repeat(1_000_000 / mark.len());
            let s = parse(&text);
            assert_eq!(s.len(), 1);
        }
        assert_eq!(inline_text("[[a](b)](c) `x`"), "a x");
    }
}
