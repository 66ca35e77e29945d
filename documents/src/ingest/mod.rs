//! Files in, structured text out: one reader per format, each producing [`Section`]s that
//! remember where they stand (page, heading path).
//!
//! Every file is hostile input: it is read whole into memory once (a file that changes or
//! vanishes mid-read is an error, never a partial document), checked against size caps, and
//! parsed by code that returns an [`IngestError`] rather than panicking.

mod html;
mod markdown;
mod pdf;
mod plain;

use std::io::Read;
use std::path::Path;

use crate::IngestError;

/// The largest file read, in bytes (64 MiB). A bigger one is refused before it is read.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// The most pages a PDF may have.
pub const MAX_PDF_PAGES: usize = 2_000;

/// The formats read here, chosen by file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    Text,
    Markdown,
    Html,
    Pdf,
}

impl Format {
    /// The format a file name's extension names (case-insensitive), if it is one read here.
    pub fn from_name(name: &str) -> Option<Format> {
        let ext = Path::new(name).extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "txt" | "text" => Some(Format::Text),
            "md" | "markdown" => Some(Format::Markdown),
            "html" | "htm" => Some(Format::Html),
            "pdf" => Some(Format::Pdf),
            _ => None,
        }
    }
}

/// Where a piece of text stands in its document: the page (PDFs only, from 1) and the
/// headings above it, outermost first, joined by " › " ("Setup › Install").
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Place {
    pub page: Option<u32>,
    pub heading: Option<String>,
}

impl Place {
    /// The outermost heading of [`Place::heading`]: the top section a chunk should not leave.
    pub fn top_heading(&self) -> Option<&str> {
        self.heading
            .as_deref()
            .map(|h| h.split(HEADING_SEPARATOR).next().unwrap_or(h))
    }
}

/// What joins the headings of a [`Place::heading`] path.
pub const HEADING_SEPARATOR: &str = " › ";

/// What kind of block a section is; chunking keeps paragraphs, list items and code whole
/// where they fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SectionKind {
    /// A heading, level 1 (outermost) to 6.
    Heading(u8),
    Paragraph,
    ListItem,
    Code,
    /// One table row, cells separated by " | ".
    TableRow,
}

/// One structural block of text with its place. Text is normalised: whitespace collapsed to
/// single spaces (code keeps its lines), no leading or trailing space, never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub kind: SectionKind,
    pub text: String,
    pub place: Place,
}

/// A file read into sections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// The file's name as given (a path's last component for [`read_document`]).
    pub name: String,
    pub size_bytes: u64,
    pub format: Format,
    pub sections: Vec<Section>,
}

/// Reads the file at `path` whole, then parses it by its extension.
pub fn read_document(path: &Path) -> Result<Document, IngestError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    // Refuse unknown formats before touching the file.
    if Format::from_name(&name).is_none() {
        return Err(IngestError::Unsupported { name });
    }
    let unreadable = |e: std::io::Error| IngestError::Unreadable {
        name: name.clone(),
        reason: io_reason(&e).to_string(),
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let expected = file.metadata().map_err(unreadable)?.len();
    check_size(&name, expected)?;
    // Read one byte past the cap so a file that grew while being read is caught too.
    let mut bytes = Vec::with_capacity(expected as usize);
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    check_size(&name, bytes.len() as u64)?;
    if bytes.len() as u64 != expected {
        return Err(IngestError::Unreadable {
            name,
            reason: "it changed while it was being read".to_string(),
        });
    }
    parse_document(&name, &bytes)
}

/// Parses a file's bytes; `name`'s extension says which format they are in.
pub fn parse_document(name: &str, bytes: &[u8]) -> Result<Document, IngestError> {
    let format = Format::from_name(name).ok_or_else(|| IngestError::Unsupported {
        name: name.to_string(),
    })?;
    check_size(name, bytes.len() as u64)?;
    if bytes.is_empty() {
        return Err(IngestError::Empty {
            name: name.to_string(),
        });
    }
    let sections = match format {
        Format::Text => plain::parse(&decode_text(name, bytes)?),
        Format::Markdown => markdown::parse(&decode_text(name, bytes)?),
        Format::Html => html::parse(&decode_text(name, bytes)?),
        Format::Pdf => pdf::parse(name, bytes)?,
    };
    if sections.is_empty() {
        return Err(IngestError::Empty {
            name: name.to_string(),
        });
    }
    Ok(Document {
        name: name.to_string(),
        size_bytes: bytes.len() as u64,
        format,
        sections,
    })
}

fn check_size(name: &str, size: u64) -> Result<(), IngestError> {
    if size > MAX_FILE_BYTES {
        const MIB: u64 = 1024 * 1024;
        return Err(IngestError::TooLarge {
            name: name.to_string(),
            size_mib: size.div_ceil(MIB),
            limit_mib: MAX_FILE_BYTES / MIB,
        });
    }
    Ok(())
}

/// Plain words for why a read failed; the user sees these, so no error codes.
fn io_reason(e: &std::io::Error) -> &'static str {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::NotFound => "the file is not there any more",
        ErrorKind::PermissionDenied => "permission to read it was refused",
        ErrorKind::IsADirectory => "it is a folder, not a file",
        _ => "reading it stopped part way",
    }
}

/// The text of a text-based file. UTF-8 (a leading byte-order mark dropped) is read as it is;
/// UTF-16 is read only when a byte-order mark says so. Anything else is refused with the
/// offset of the first bad byte: guessing an encoding would put wrong text in answers.
fn decode_text(name: &str, bytes: &[u8]) -> Result<String, IngestError> {
    let not_utf8 = |offset| IngestError::NotUtf8 {
        name: name.to_string(),
        offset,
    };
    if let Some(rest) = bytes.strip_prefix(b"\xEF\xBB\xBF") {
        return std::str::from_utf8(rest)
            .map(str::to_string)
            .map_err(|e| not_utf8(e.valid_up_to() + 3));
    }
    let utf16 = |rest: &[u8], from: fn([u8; 2]) -> u16| {
        if !rest.len().is_multiple_of(2) {
            return Err(not_utf8(bytes.len() - 1));
        }
        let units = rest.chunks_exact(2).map(|p| from([p[0], p[1]]));
        let mut out = String::with_capacity(rest.len() / 2);
        for (i, c) in char::decode_utf16(units).enumerate() {
            out.push(c.map_err(|_| not_utf8(2 + 2 * i))?);
        }
        Ok(out)
    };
    if let Some(rest) = bytes.strip_prefix(b"\xFF\xFE") {
        return utf16(rest, u16::from_le_bytes);
    }
    if let Some(rest) = bytes.strip_prefix(b"\xFE\xFF") {
        return utf16(rest, u16::from_be_bytes);
    }
    std::str::from_utf8(bytes)
        .map(str::to_string)
        .map_err(|e| not_utf8(e.valid_up_to()))
}

/// Collapses runs of whitespace (and control characters) into single spaces and trims.
pub(crate) fn collapse_whitespace(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
    {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// Builds sections while tracking the heading path: the one piece of structure every format
/// shares.
#[derive(Default)]
pub(crate) struct SectionBuilder {
    sections: Vec<Section>,
    /// (level, text) of the headings above the current point, outermost first.
    headings: Vec<(u8, String)>,
    page: Option<u32>,
}

impl SectionBuilder {
    pub(crate) fn set_page(&mut self, page: u32) {
        self.page = Some(page);
    }

    fn place(&self) -> Place {
        let heading = (!self.headings.is_empty()).then(|| {
            let parts: Vec<&str> = self.headings.iter().map(|(_, t)| t.as_str()).collect();
            parts.join(HEADING_SEPARATOR)
        });
        Place {
            page: self.page,
            heading,
        }
    }

    /// A heading of `level` (1 outermost): it replaces any heading at its level or deeper.
    pub(crate) fn heading(&mut self, level: u8, text: &str) {
        let text = collapse_whitespace(text);
        if text.is_empty() {
            return;
        }
        let level = level.clamp(1, 6);
        while self.headings.last().is_some_and(|(l, _)| *l >= level) {
            self.headings.pop();
        }
        self.headings.push((level, text.clone()));
        let place = self.place();
        self.sections.push(Section {
            kind: SectionKind::Heading(level),
            text,
            place,
        });
    }

    /// A block of prose (paragraph, list item, table row): whitespace collapsed.
    pub(crate) fn block(&mut self, kind: SectionKind, text: &str) {
        let text = collapse_whitespace(text);
        self.push(kind, text);
    }

    /// A code block: lines kept, trailing spaces and blank edges trimmed.
    pub(crate) fn code(&mut self, text: &str) {
        let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
        let text = lines.join("\n").trim_matches('\n').to_string();
        if text.trim().is_empty() {
            return;
        }
        self.push(SectionKind::Code, text);
    }

    fn push(&mut self, kind: SectionKind, text: String) {
        if text.is_empty() {
            return;
        }
        let place = self.place();
        self.sections.push(Section { kind, text, place });
    }

    pub(crate) fn finish(self) -> Vec<Section> {
        self.sections
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_comes_from_the_extension() {
        assert_eq!(Format::from_name("a/B.PDF"), Some(Format::Pdf));
        assert_eq!(Format::from_name("notes.md"), Some(Format::Markdown));
        assert_eq!(Format::from_name("page.htm"), Some(Format::Html));
        assert_eq!(Format::from_name("x.txt"), Some(Format::Text));
        assert_eq!(Format::from_name("x.docx"), None);
        assert_eq!(Format::from_name("README"), None);
    }

    #[test]
    fn text_is_utf8_or_utf16_with_a_mark_and_nothing_guessed() {
        assert_eq!(decode_text("a.txt", "héllo".as_bytes()).unwrap(), "héllo");
        assert_eq!(decode_text("a.txt", b"\xEF\xBB\xBFhi").unwrap(), "hi");
        assert_eq!(decode_text("a.txt", b"\xFF\xFEh\0i\0").unwrap(), "hi");
        assert_eq!(decode_text("a.txt", b"\xFE\xFF\0h\0i").unwrap(), "hi");
        // Latin-1 "café": refused at the é, not guessed.
        let err = decode_text("a.txt", b"caf\xE9 au lait").unwrap_err();
        assert_eq!(
            err,
            IngestError::NotUtf8 {
                name: "a.txt".into(),
                offset: 3
            }
        );
        assert!(decode_text("a.txt", b"\xFF\xFEh\0i").is_err());
    }

    #[test]
    fn empty_and_unknown_files_are_refused() {
        assert!(matches!(
            parse_document("a.txt", b""),
            Err(IngestError::Empty { .. })
        ));
        assert!(matches!(
            parse_document("a.md", b"  \n\n\t "),
            Err(IngestError::Empty { .. })
        ));
        assert!(matches!(
            parse_document("a.docx", b"hello"),
            Err(IngestError::Unsupported { .. })
        ));
    }

    #[test]
    fn headings_make_a_path_that_a_shallower_heading_cuts() {
        let mut b = SectionBuilder::default();
        b.heading(1, "Setup");
        b.heading(2, "Install");
        b.block(SectionKind::Paragraph, " run   it\n now ");
        b.heading(2, "Configure");
        b.heading(1, "Use");
        let s = b.finish();
        assert_eq!(s[2].text, "run it now");
        assert_eq!(s[2].place.heading.as_deref(), Some("Setup › Install"));
        assert_eq!(s[2].place.top_heading(), Some("Setup"));
        assert_eq!(s[3].place.heading.as_deref(), Some("Setup › Configure"));
        assert_eq!(s[4].place.heading.as_deref(), Some("Use"));
    }
}
