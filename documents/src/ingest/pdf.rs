//! PDF: the text layer, page by page, through lopdf. The content stream is walked here (not
//! lopdf's `extract_text`) so each line keeps its font size and height on the page: lines set
//! larger than the body text become headings, vertical gaps separate paragraphs.
//!
//! Limits: text inside form XObjects and annotations is not read; reading order is the
//! content stream's, which is the visual order for the PDFs that word processors write.

use std::collections::BTreeMap;

use lopdf::content::Content;
use lopdf::{Encoding, Object, ObjectId};

use super::plain::join_hyphenated;
use super::{Section, SectionBuilder, SectionKind, MAX_PDF_PAGES};
use crate::IngestError;

/// The most one stream (a page's content, an object stream) may inflate to: a small
/// compressed stream cannot take the memory of the device.
const MAX_STREAM_BYTES: usize = 64 * 1024 * 1024;

/// A line is a heading when its size is at least this many times the body text's.
const HEADING_RATIO: f32 = 1.15;
/// A vertical step larger than this many times the font size starts a new paragraph.
const PARAGRAPH_GAP: f32 = 1.5;

pub(super) fn parse(name: &str, bytes: &[u8]) -> Result<Vec<Section>, IngestError> {
    let malformed = |detail: String| IngestError::MalformedPdf {
        name: name.to_string(),
        detail,
    };
    // A PDF starts with "%PDF-" within its first kilobyte; anything else is not one.
    if !bytes.windows(5).take(1024).any(|w| w == b"%PDF-") {
        return Err(malformed("no %PDF- header".into()));
    }
    // A PDF ends with "%%EOF" (trailing junk aside); a file cut short is refused whole
    // rather than read for whatever pages survive.
    let tail = &bytes[bytes.len().saturating_sub(1024)..];
    if !tail.windows(5).any(|w| w == b"%%EOF") {
        return Err(malformed("no %%EOF marker: the file is cut short".into()));
    }
    let looks_encrypted = bytes.windows(8).any(|w| w == b"/Encrypt");
    // lopdf is written for untrusted input, but a bug in it must not take the app down: a
    // panic while reading becomes a malformed-file error.
    let read = std::panic::catch_unwind(|| read_pages(bytes));
    let pages = match read {
        Ok(Ok(pages)) => pages,
        Ok(Err(PdfProblem::Encrypted)) => {
            return Err(IngestError::Encrypted {
                name: name.to_string(),
            })
        }
        Ok(Err(PdfProblem::TooManyPages(pages))) => {
            return Err(IngestError::TooManyPages {
                name: name.to_string(),
                pages,
                limit: MAX_PDF_PAGES,
            })
        }
        Ok(Err(PdfProblem::Broken(_))) if looks_encrypted => {
            return Err(IngestError::Encrypted {
                name: name.to_string(),
            })
        }
        Ok(Err(PdfProblem::Broken(detail))) => return Err(malformed(detail)),
        Err(_) => return Err(malformed("the PDF reader panicked".into())),
    };
    if pages.is_empty() {
        return Err(malformed("no pages".into()));
    }
    if pages
        .iter()
        .all(|p| p.iter().all(|l| l.text.trim().is_empty()))
    {
        return Err(IngestError::NoTextLayer {
            name: name.to_string(),
            pages: pages.len(),
        });
    }
    Ok(sections(&pages))
}

enum PdfProblem {
    Encrypted,
    TooManyPages(usize),
    Broken(String),
}

/// One line of text as set on the page.
#[derive(Debug, Clone)]
struct Line {
    text: String,
    /// The font size in text space, scaled by the text matrix.
    size: f32,
    /// The baseline's height (text space after the text matrix; larger is higher).
    y: f32,
}

fn read_pages(bytes: &[u8]) -> Result<Vec<Vec<Line>>, PdfProblem> {
    let options = lopdf::LoadOptions {
        max_decompressed_size: Some(MAX_STREAM_BYTES),
        ..Default::default()
    };
    let doc = lopdf::Document::load_mem_with_options(bytes, options).map_err(|e| match e {
        lopdf::Error::InvalidPassword | lopdf::Error::Decryption(_) => PdfProblem::Encrypted,
        e => PdfProblem::Broken(e.to_string()),
    })?;
    // A file whose user password is empty is decrypted on load; one that still carries its
    // /Encrypt entry waits for a password the user has not given.
    if doc.trailer.has(b"Encrypt") && doc.encryption_state.is_none() {
        return Err(PdfProblem::Encrypted);
    }
    let pages: BTreeMap<u32, ObjectId> = doc.get_pages();
    if pages.len() > MAX_PDF_PAGES {
        return Err(PdfProblem::TooManyPages(pages.len()));
    }
    let mut out = Vec::with_capacity(pages.len());
    for &page_id in pages.values() {
        out.push(page_lines(&doc, page_id)?);
    }
    Ok(out)
}

/// The lines of one page, in content-stream order.
fn page_lines(doc: &lopdf::Document, page_id: ObjectId) -> Result<Vec<Line>, PdfProblem> {
    let broken = |e: lopdf::Error| PdfProblem::Broken(e.to_string());
    // A font whose encoding cannot be read is skipped: its text is lost, the rest is kept.
    let encodings: BTreeMap<Vec<u8>, Encoding> = doc
        .get_page_fonts(page_id)
        .map_err(broken)?
        .into_iter()
        .filter_map(|(name, font)| {
            font.get_font_encoding_with_limit(doc, MAX_STREAM_BYTES)
                .ok()
                .map(|e| (name, e))
        })
        .collect();
    let data = doc
        .get_page_content_with_limit(page_id, MAX_STREAM_BYTES)
        .map_err(broken)?;
    let content = Content::decode(&data).map_err(broken)?;

    let mut walker = Walker::default();
    for op in &content.operations {
        let num = |i: usize| -> f32 {
            op.operands
                .get(i)
                .and_then(|o| o.as_float().ok())
                .filter(|x| x.is_finite())
                .unwrap_or(0.0)
        };
        match op.operator.as_str() {
            "BT" => {
                walker.tm = IDENTITY;
                walker.tlm = IDENTITY;
            }
            "Tf" => {
                walker.font = op
                    .operands
                    .first()
                    .and_then(|o| o.as_name().ok())
                    .map(<[u8]>::to_vec);
                walker.font_size = num(1);
            }
            "TL" => walker.leading = num(0),
            "Td" => walker.move_line(num(0), num(1)),
            "TD" => {
                walker.leading = -num(1);
                walker.move_line(num(0), num(1));
            }
            "Tm" => {
                walker.tlm = [num(0), num(1), num(2), num(3), num(4), num(5)];
                walker.tm = walker.tlm;
            }
            "T*" => walker.next_line(),
            "Tj" | "TJ" => walker.show(&op.operands, &encodings),
            "'" => {
                walker.next_line();
                walker.show(&op.operands, &encodings);
            }
            "\"" => {
                walker.next_line();
                walker.show(op.operands.get(2..).unwrap_or(&[]), &encodings);
            }
            _ => {}
        }
    }
    Ok(walker.lines)
}

type Matrix = [f32; 6];
const IDENTITY: Matrix = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0];

/// The text state the walk needs: matrices, font, leading, and the lines so far.
#[derive(Default)]
struct Walker {
    tm: Matrix,
    tlm: Matrix,
    font: Option<Vec<u8>>,
    font_size: f32,
    leading: f32,
    lines: Vec<Line>,
}

impl Walker {
    /// `Td`: the next line starts at (tx, ty) from the start of this one.
    fn move_line(&mut self, tx: f32, ty: f32) {
        let [a, b, c, d, e, f] = self.tlm;
        self.tlm = [a, b, c, d, e + tx * a + ty * c, f + tx * b + ty * d];
        self.tm = self.tlm;
    }

    fn next_line(&mut self) {
        self.move_line(0.0, -self.leading);
    }

    fn show(&mut self, operands: &[Object], encodings: &BTreeMap<Vec<u8>, Encoding>) {
        let Some(encoding) = self.font.as_ref().and_then(|f| encodings.get(f)) else {
            return;
        };
        let mut text = String::new();
        collect_text(&mut text, encoding, operands);
        if text.is_empty() {
            return;
        }
        let [_, b, _, d, _, y] = self.tm;
        let size = (self.font_size * b.hypot(d)).abs();
        let size = if size.is_finite() && size > 0.0 {
            size
        } else {
            1.0
        };
        match self.lines.last_mut() {
            // Text on the same baseline continues the line.
            Some(line) if (line.y - y).abs() < 0.3 * size.max(line.size) => {
                if !line.text.ends_with(char::is_whitespace)
                    && !text.starts_with(char::is_whitespace)
                {
                    line.text.push(' ');
                }
                line.text.push_str(&text);
                line.size = line.size.max(size);
            }
            _ => self.lines.push(Line { text, size, y }),
        }
        // Without glyph widths the pen's advance is unknown; the next show on this baseline
        // joins the line above, which is what a line set in pieces wants.
    }
}

/// The text of `Tj`/`TJ` operands: strings decoded, a large negative kern read as a space.
fn collect_text(out: &mut String, encoding: &Encoding, operands: &[Object]) {
    for operand in operands {
        match operand {
            Object::String(bytes, _) => {
                let _ = encoding.write_to_string(bytes, out);
            }
            // TJ arrays are one level deep; nested arrays are not valid and are not followed.
            Object::Array(items) => {
                for item in items {
                    match item {
                        Object::String(bytes, _) => {
                            let _ = encoding.write_to_string(bytes, out);
                        }
                        Object::Integer(i) if *i < -200 => out.push(' '),
                        Object::Real(r) if *r < -200.0 => out.push(' '),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
}

/// The size-class of a font size, to half a point.
fn size_key(size: f32) -> i32 {
    (size * 2.0).round() as i32
}

/// Lines to sections: the body size is the one most text is set in; larger sizes are heading
/// levels (largest first), and gaps and size changes end paragraphs.
fn sections(pages: &[Vec<Line>]) -> Vec<Section> {
    let mut chars_by_size: BTreeMap<i32, usize> = BTreeMap::new();
    for line in pages.iter().flatten() {
        *chars_by_size.entry(size_key(line.size)).or_default() += line.text.chars().count();
    }
    let body = chars_by_size
        .iter()
        .max_by_key(|(k, n)| (**n, -**k))
        .map_or(0, |(k, _)| *k);
    let mut heading_sizes: Vec<i32> = chars_by_size
        .keys()
        .copied()
        .filter(|&k| k as f32 >= body as f32 * HEADING_RATIO)
        .collect();
    heading_sizes.sort_unstable_by(|a, b| b.cmp(a));
    let level_of = |line: &Line| -> Option<u8> {
        let k = size_key(line.size);
        // Short lines only: a whole paragraph set large is emphasis, not a heading.
        if line.text.chars().count() > 200 {
            return None;
        }
        heading_sizes
            .iter()
            .position(|&h| h == k)
            .map(|i| (i + 1).min(6) as u8)
    };

    let mut b = SectionBuilder::default();
    for (i, lines) in pages.iter().enumerate() {
        b.set_page(i as u32 + 1);
        let mut block = String::new();
        let mut block_level: Option<u8> = None;
        let mut prev: Option<&Line> = None;
        for line in lines.iter().filter(|l| !l.text.trim().is_empty()) {
            let level = level_of(line);
            let breaks = match prev {
                None => true,
                Some(p) => {
                    let step = p.y - line.y;
                    level != block_level
                        || size_key(p.size) != size_key(line.size)
                        || step < 0.0
                        || step > PARAGRAPH_GAP * line.size.max(p.size)
                }
            };
            if breaks {
                flush(&mut b, &block, block_level);
                block.clear();
                block_level = level;
            }
            block.push_str(line.text.trim());
            block.push('\n');
            prev = Some(line);
        }
        flush(&mut b, &block, block_level);
    }
    b.finish()
}

fn flush(b: &mut SectionBuilder, block: &str, level: Option<u8>) {
    match level {
        Some(level) => b.heading(level, block),
        None => b.block(SectionKind::Paragraph, &join_hyphenated(block)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str, size: f32, y: f32) -> Line {
        Line {
            text: text.into(),
            size,
            y,
        }
    }

    #[test]
    fn sizes_make_headings_and_gaps_make_paragraphs() {
        let pages = vec![
            vec![
                line("Guide", 20.0, 740.0),
                line("Planning", 14.0, 702.0),
                line("A pond needs sun and a biologi-", 11.0, 680.0),
                line("cal filter.", 11.0, 666.0),
                line("Second paragraph.", 11.0, 630.0),
            ],
            vec![line("Depth", 14.0, 740.0), line("Dig deep.", 11.0, 718.0)],
        ];
        let s = sections(&pages);
        let got: Vec<(SectionKind, &str, Option<u32>, Option<&str>)> = s
            .iter()
            .map(|s| {
                (
                    s.kind,
                    s.text.as_str(),
                    s.place.page,
                    s.place.heading.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (SectionKind::Heading(1), "Guide", Some(1), Some("Guide")),
                (
                    SectionKind::Heading(2),
                    "Planning",
                    Some(1),
                    Some("Guide › Planning")
                ),
                (
                    SectionKind::Paragraph,
                    "A pond needs sun and a biological filter.",
                    Some(1),
                    Some("Guide › Planning")
                ),
                (
                    SectionKind::Paragraph,
                    "Second paragraph.",
                    Some(1),
                    Some("Guide › Planning")
                ),
                (
                    SectionKind::Heading(2),
                    "Depth",
                    Some(2),
                    Some("Guide › Depth")
                ),
                (
                    SectionKind::Paragraph,
                    "Dig deep.",
                    Some(2),
                    Some("Guide › Depth")
                ),
            ]
        );
    }

    #[test]
    fn hostile_bytes_are_errors_not_panics() {
        let cases: [&[u8]; 6] = [
            b"",
            b"%PDF-",
            b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF",
            b"not a pdf at all",
            b"%PDF-1.4\n%\xE2\xE3\xCF\xD3\nxref\n0 99999999\n",
            b"%PDF-1.4 /Encrypt garbage",
        ];
        for bytes in cases {
            assert!(parse("x.pdf", bytes).is_err());
        }
        // Random bytes behind a header, from a fixed seed.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for len in [10usize, 100, 1000, 10_000] {
            let mut bytes = b"%PDF-1.5\n".to_vec();
            for _ in 0..len {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                bytes.push(state as u8);
            }
            bytes.extend_from_slice(b"\n%%EOF\n");
            assert!(parse("random.pdf", &bytes).is_err());
        }
    }
}
