//! Plain text: paragraphs are separated by blank lines; there are no headings.

use super::{Section, SectionBuilder, SectionKind};

pub(super) fn parse(text: &str) -> Vec<Section> {
    let mut b = SectionBuilder::default();
    let mut paragraph = String::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            b.block(SectionKind::Paragraph, &join_hyphenated(&paragraph));
            paragraph.clear();
        } else {
            paragraph.push_str(line);
            paragraph.push('\n');
        }
    }
    b.block(SectionKind::Paragraph, &join_hyphenated(&paragraph));
    b.finish()
}

/// Joins words broken across lines by a hyphen ("exam-\nple" → "example") where the break is
/// obvious: a letter before the hyphen and a lower-case letter starting the next line.
pub(crate) fn join_hyphenated(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut lines = text.lines().peekable();
    // Whether the previous line ended in a joined hyphen, so this one continues its word.
    let mut continues = false;
    while let Some(line) = lines.next() {
        let line = if continues { line.trim_start() } else { line };
        let line = line.trim_end();
        let next_starts_lower = lines
            .peek()
            .and_then(|n| n.trim_start().chars().next())
            .is_some_and(char::is_lowercase);
        let before_hyphen = line.strip_suffix('-').and_then(|s| s.chars().last());
        continues = next_starts_lower && before_hyphen.is_some_and(char::is_alphabetic);
        if continues {
            out.push_str(&line[..line.len() - 1]);
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_lines_separate_paragraphs() {
        let s = parse("First line\nsame paragraph.\n\n\nSecond   one.\n");
        let texts: Vec<&str> = s.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(texts, ["First line same paragraph.", "Second one."]);
        assert!(s.iter().all(|s| s.place.heading.is_none()));
    }

    #[test]
    fn obvious_hyphenated_breaks_are_joined() {
        assert_eq!(
            join_hyphenated("Biologi-\ncal filters and well-\nKnown names"),
            "Biological filters and well-\nKnown names\n"
        );
        assert_eq!(join_hyphenated("a -\nb"), "a -\nb\n");
    }
}
