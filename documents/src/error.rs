//! The one error of this crate: why a file could not be read as a document, said for a person.
//!
//! Messages are shown to the user as they are: each says what is wrong with the file and what
//! they can do, never blames them, and names no parser or decoder.

use thiserror::Error;

/// Why a file could not be turned into a document.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum IngestError {
    /// The file could not be opened or read to its end.
    #[error("could not read \"{name}\": {reason}. Check that the file is still there and readable, then add it again.")]
    Unreadable { name: String, reason: String },
    /// The extension names a format this reader does not know.
    #[error("\"{name}\" is not a kind of file that can be read here. Supported files are .txt, .md, .html, .htm and .pdf; save or export it as one of those and add it again.")]
    Unsupported { name: String },
    /// The file holds no bytes, or no text once its markup is set aside.
    #[error("\"{name}\" has no text to read. If the text is in another file or another format, add that one instead.")]
    Empty { name: String },
    /// The file is over [`MAX_FILE_BYTES`](crate::ingest::MAX_FILE_BYTES).
    #[error("\"{name}\" is too large to read here ({size_mib} MiB; the limit is {limit_mib} MiB). Split it into smaller files and add those.")]
    TooLarge {
        name: String,
        size_mib: u64,
        limit_mib: u64,
    },
    /// The PDF has more than [`MAX_PDF_PAGES`](crate::ingest::MAX_PDF_PAGES) pages.
    #[error("\"{name}\" has {pages} pages, more than the {limit} that can be read here. Split it into smaller PDFs and add those.")]
    TooManyPages {
        name: String,
        pages: usize,
        limit: usize,
    },
    /// A text file is not valid UTF-8 (nor UTF-16 with a byte-order mark).
    #[error("\"{name}\" is not saved as UTF-8 text (the first unreadable byte is at position {offset}). Save it again with the UTF-8 encoding and add it again.")]
    NotUtf8 { name: String, offset: usize },
    /// The PDF needs a password to be opened.
    #[error("\"{name}\" is password-protected, so its text cannot be read. Save a copy without the password and add that.")]
    Encrypted { name: String },
    /// The PDF has pages but none has text a program can read: a scan or photographs.
    #[error("\"{name}\" has no text layer: its pages look like scanned images. Run it through text recognition (OCR) and add the result.")]
    NoTextLayer { name: String, pages: usize },
    /// The PDF's structure is damaged or not a PDF at all.
    #[error("\"{name}\" could not be read as a PDF: the file looks damaged or incomplete. If it opens in a PDF viewer, save or print it to a new PDF and add that.")]
    MalformedPdf { name: String, detail: String },
}
