//! Sections cut into chunks sized for the embedder, each remembering its place.
//!
//! A chunk never crosses a page of a PDF or a top-level section, and starts afresh at a
//! heading once it holds half its target. Blocks (paragraphs, list items, code) are kept whole
//! when they fit; a longer one is split at sentence ends (code at line ends), and each piece
//! after the first repeats the previous piece's last sentence so a fact cut in two is still
//! found whole in one of them.

use std::ops::Range;

use crate::ingest::{Document, Place, SectionKind};

/// How chunks are sized, in characters (Unicode scalar values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkOptions {
    /// The size chunks are filled to.
    pub target_chars: usize,
    /// No chunk is longer; a block up to this size is kept whole.
    pub max_chars: usize,
    /// The most text a split block's next piece repeats from the one before.
    pub overlap_chars: usize,
}

impl Default for ChunkOptions {
    /// 800 characters filled, 1,000 at most: English prose runs about 4.5 characters per word
    /// piece, so the longest chunk is about 220 pieces, inside the encoder's 256.
    fn default() -> Self {
        ChunkOptions {
            target_chars: 800,
            max_chars: 1_000,
            overlap_chars: 150,
        }
    }
}

impl ChunkOptions {
    /// The options made consistent: a target of at least 16 characters, a maximum at least
    /// the target, and an overlap that fits between them.
    fn checked(&self) -> ChunkOptions {
        let target_chars = self.target_chars.max(16);
        let max_chars = self.max_chars.max(target_chars);
        // The overlap and the separator after it fit between target and maximum.
        let overlap_chars = self
            .overlap_chars
            .min((max_chars - target_chars).saturating_sub(1));
        ChunkOptions {
            target_chars,
            max_chars,
            overlap_chars,
        }
    }
}

/// A piece of a document, sized for the embedder, with the place it is cited by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Position in the document's chunk list, from 0.
    pub index: usize,
    /// Headings and blocks joined by line breaks; at most `max_chars` characters.
    pub text: String,
    /// Page and heading path of the chunk's first block of text.
    pub place: Place,
    /// The document sections this chunk's text comes from.
    pub sections: Range<usize>,
    /// Characters at the start of `text` repeated from the chunk before (0 unless a block was
    /// split).
    pub overlap_chars: usize,
}

/// Cuts `doc` into chunks.
pub fn chunk(doc: &Document, opts: &ChunkOptions) -> Vec<Chunk> {
    let opts = opts.checked();
    let mut c = Chunker {
        opts,
        chunks: Vec::new(),
        open: None,
    };
    let mut run: Option<(Option<u32>, Option<&str>)> = None;
    for (i, section) in doc.sections.iter().enumerate() {
        let key = (section.place.page, section.place.top_heading());
        if run != Some(key) {
            c.close();
            run = Some(key);
        }
        let len = char_len(&section.text);
        let is_heading = matches!(section.kind, SectionKind::Heading(_));
        if let Some(open) = &c.open {
            let full = open.len + 1 + len > opts.target_chars;
            let fresh_heading = is_heading && open.len >= opts.target_chars / 2;
            if full || fresh_heading {
                c.close();
            }
        }
        if len > opts.max_chars {
            c.close();
            c.split(i, section.kind, &section.text, &section.place);
        } else {
            c.append(i, is_heading, &section.text, &section.place);
        }
    }
    c.close();
    let mut chunks = c.chunks;
    // Chunks of headings alone carry no content; keep them only for a document of headings.
    if chunks.iter().any(|c| !c.headings_only) {
        chunks.retain(|c| !c.headings_only);
    }
    chunks
        .into_iter()
        .enumerate()
        .map(|(index, c)| Chunk {
            index,
            text: c.text,
            place: c.place,
            sections: c.sections,
            overlap_chars: c.overlap_chars,
        })
        .collect()
}

fn char_len(s: &str) -> usize {
    s.chars().count()
}

struct Open {
    text: String,
    len: usize,
    place: Place,
    /// Whether `place` came from a heading (a later block's place is more precise).
    place_from_heading: bool,
    sections: Range<usize>,
    headings_only: bool,
    overlap_chars: usize,
}

struct Chunker {
    opts: ChunkOptions,
    chunks: Vec<Open>,
    open: Option<Open>,
}

impl Chunker {
    fn close(&mut self) {
        if let Some(open) = self.open.take() {
            self.chunks.push(open);
        }
    }

    fn append(&mut self, section: usize, is_heading: bool, text: &str, place: &Place) {
        let open = self.open.get_or_insert_with(|| Open {
            text: String::new(),
            len: 0,
            place: place.clone(),
            place_from_heading: is_heading,
            sections: section..section,
            headings_only: true,
            overlap_chars: 0,
        });
        if !open.text.is_empty() {
            open.text.push('\n');
            open.len += 1;
        }
        open.text.push_str(text);
        open.len += char_len(text);
        open.sections.end = section + 1;
        if !is_heading {
            if open.place_from_heading && open.headings_only {
                open.place = place.clone();
                open.place_from_heading = false;
            }
            open.headings_only = false;
        }
    }

    /// A block longer than `max_chars`, cut into pieces of at most `target_chars` plus the
    /// overlap repeated from the piece before.
    fn split(&mut self, section: usize, kind: SectionKind, text: &str, place: &Place) {
        let sep = if kind == SectionKind::Code { "\n" } else { " " };
        let mut piece = String::new();
        // Characters of `piece`, of them carried over from the piece before, and whether any
        // new unit follows the carried text.
        let (mut len, mut carried, mut fresh) = (0, 0, false);
        let mut last_unit = "";
        for unit in units(text, kind == SectionKind::Code, self.opts.target_chars) {
            let unit_len = char_len(unit);
            let new_len = if fresh { len - carried + 1 } else { 0 };
            if fresh && new_len + unit_len > self.opts.target_chars {
                self.push_piece(section, &piece, place, carried);
                let tail = tail(last_unit, self.opts.overlap_chars);
                piece = tail.to_string();
                len = char_len(tail);
                carried = len;
            }
            if !piece.is_empty() {
                piece.push_str(sep);
                len += 1;
            }
            piece.push_str(unit);
            len += unit_len;
            fresh = true;
            last_unit = unit;
        }
        if fresh {
            self.push_piece(section, &piece, place, carried);
        }
    }

    fn push_piece(&mut self, section: usize, text: &str, place: &Place, overlap: usize) {
        self.chunks.push(Open {
            text: text.to_string(),
            len: char_len(text),
            place: place.clone(),
            place_from_heading: false,
            sections: section..section + 1,
            headings_only: false,
            overlap_chars: overlap,
        });
    }
}

/// The end of `s` to at most `max` characters, starting at a word: the whole of a short
/// sentence, the last words of a long one, nothing if `max` is 0.
fn tail(s: &str, max: usize) -> &str {
    let len = char_len(s);
    if len <= max {
        return s;
    }
    let start = s.char_indices().nth(len - max).map_or(s.len(), |(i, _)| i);
    let rest = &s[start..];
    match rest.find(char::is_whitespace) {
        Some(ws) => rest[ws..].trim_start(),
        None => "",
    }
}

/// The units a long block is split into, each at most `max` characters: lines for code,
/// sentences for prose; a longer unit is cut at spaces, and a word longer still at `max`.
fn units(text: &str, code: bool, max: usize) -> Vec<&str> {
    let coarse: Vec<&str> = if code {
        text.lines().collect()
    } else {
        sentences(text)
    };
    let mut out = Vec::with_capacity(coarse.len());
    for unit in coarse {
        if char_len(unit) <= max {
            out.push(unit);
            continue;
        }
        // Words gathered into runs of at most `max` characters.
        let mut start: Option<usize> = None;
        let mut end = 0;
        let mut len = 0;
        for (i, word) in word_spans(unit) {
            let wlen = char_len(word);
            if start.is_some() && len + 1 + wlen > max {
                out.push(&unit[start.unwrap_or(0)..end]);
                start = None;
            }
            if wlen > max {
                // One word longer than a chunk: cut at character boundaries.
                let mut rest = word;
                while char_len(rest) > max {
                    let cut = rest.char_indices().nth(max).map_or(rest.len(), |(i, _)| i);
                    out.push(&rest[..cut]);
                    rest = &rest[cut..];
                }
                start = Some(i + (word.len() - rest.len()));
                end = i + word.len();
                len = char_len(rest);
                continue;
            }
            if start.is_none() {
                start = Some(i);
                len = wlen;
            } else {
                len += 1 + wlen;
            }
            end = i + word.len();
        }
        if let Some(s) = start {
            out.push(&unit[s..end]);
        }
    }
    out
}

/// The words of `s` (split at whitespace) with their byte offsets.
fn word_spans(s: &str) -> impl Iterator<Item = (usize, &str)> {
    s.split_whitespace()
        .map(move |w| (w.as_ptr() as usize - s.as_ptr() as usize, w))
}

/// Sentences of normalised prose: a sentence ends at '.', '!', '?' or '…' (and any closing
/// quotes or brackets) followed by a space.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if !matches!(c, '.' | '!' | '?' | '…') {
            continue;
        }
        let mut end = i + c.len_utf8();
        while let Some(&(j, d)) = chars.peek() {
            if matches!(d, '"' | '\'' | ')' | ']' | '”' | '’' | '»') {
                end = j + d.len_utf8();
                chars.next();
            } else {
                break;
            }
        }
        if chars.peek().is_some_and(|&(_, d)| d.is_whitespace()) {
            let s = text[start..end].trim();
            if !s.is_empty() {
                out.push(s);
            }
            start = end;
        }
    }
    let s = text[start..].trim();
    if !s.is_empty() {
        out.push(s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::{Format, Section};

    fn doc(sections: Vec<(SectionKind, &str, Option<u32>, Option<&str>)>) -> Document {
        Document {
            name: "t.md".into(),
            size_bytes: 0,
            format: Format::Markdown,
            sections: sections
                .into_iter()
                .map(|(kind, text, page, heading)| Section {
                    kind,
                    text: text.into(),
                    place: Place {
                        page,
                        heading: heading.map(str::to_string),
                    },
                })
                .collect(),
        }
    }

    #[test]
    fn sentences_split_at_ends_followed_by_space() {
        assert_eq!(
            sentences("One. Two! \"Three?\" Four… e.g.five. 3.5 stays"),
            [
                "One.",
                "Two!",
                "\"Three?\"",
                "Four…",
                "e.g.five.",
                "3.5 stays"
            ]
        );
    }

    #[test]
    fn small_blocks_share_a_chunk_but_not_across_top_sections_or_pages() {
        let d = doc(vec![
            (SectionKind::Heading(1), "A", None, Some("A")),
            (SectionKind::Paragraph, "one", None, Some("A")),
            (SectionKind::Heading(2), "B", None, Some("A › B")),
            (SectionKind::Paragraph, "two", None, Some("A › B")),
            (SectionKind::Heading(1), "C", Some(1), Some("C")),
            (SectionKind::Paragraph, "three", Some(1), Some("C")),
            (SectionKind::Paragraph, "four", Some(2), Some("C")),
        ]);
        let c = chunk(&d, &ChunkOptions::default());
        let texts: Vec<&str> = c.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(texts, ["A\none\nB\ntwo", "C\nthree", "four"]);
        assert_eq!(c[0].place.heading.as_deref(), Some("A"));
        assert_eq!(c[0].sections, 0..4);
        assert_eq!(c[2].place.page, Some(2));
        assert_eq!(c.iter().map(|c| c.index).collect::<Vec<_>>(), [0, 1, 2]);
    }

    #[test]
    fn long_blocks_split_with_overlap_and_bounded_size() {
        let sentence = "The pump moves the whole volume of the pond every two hours. ";
        let long = sentence.repeat(60);
        let d = doc(vec![(SectionKind::Paragraph, long.trim(), None, None)]);
        let opts = ChunkOptions::default();
        let c = chunk(&d, &opts);
        assert!(c.len() >= 4, "{}", c.len());
        for (i, ch) in c.iter().enumerate() {
            assert!(
                char_len(&ch.text) <= opts.max_chars,
                "{}",
                char_len(&ch.text)
            );
            if i > 0 {
                assert!(ch.overlap_chars > 0);
                let repeated: String = ch.text.chars().take(ch.overlap_chars).collect();
                assert!(c[i - 1].text.ends_with(repeated.trim()), "{repeated:?}");
            }
        }
    }

    #[test]
    fn giant_words_and_code_are_cut_within_bounds() {
        let word = "x".repeat(5_000);
        let code = "let a = 1;\n".repeat(300);
        let d = doc(vec![
            (SectionKind::Paragraph, &word, None, None),
            (SectionKind::Code, code.trim_end(), None, None),
        ]);
        let opts = ChunkOptions {
            target_chars: 100,
            max_chars: 150,
            overlap_chars: 30,
        };
        let c = chunk(&d, &opts);
        let total_x: usize = c.iter().map(|c| c.text.matches('x').count()).sum();
        assert!(total_x >= 5_000);
        assert!(c.iter().all(|c| char_len(&c.text) <= 150));
        assert!(c.iter().any(|c| c.text.starts_with("let a = 1;\n")));
    }
}
