//! Ingest over the fixtures (tests/fixtures/README.md says how each was made): structure and
//! places recorded, chunks within bounds, and every hostile file refused with the right error
//! and a message a person can act on.

use std::path::{Path, PathBuf};

use kostant_documents::ingest::{MAX_FILE_BYTES, MAX_PDF_PAGES};
use kostant_documents::{
    chunk, parse_document, read_document, ChunkOptions, Document, Format, IngestError, SectionKind,
};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn read(name: &str) -> Document {
    read_document(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn headings(doc: &Document) -> Vec<(u8, &str)> {
    doc.sections
        .iter()
        .filter_map(|s| match s.kind {
            SectionKind::Heading(level) => Some((level, s.text.as_str())),
            _ => None,
        })
        .collect()
}

#[test]
fn pdf_pages_and_headings_are_recorded() {
    let doc = read("guide.pdf");
    assert_eq!(doc.format, Format::Pdf);
    assert_eq!(
        doc.size_bytes,
        std::fs::metadata(fixture("guide.pdf")).unwrap().len()
    );
    assert_eq!(
        headings(&doc)[..4],
        [
            (1, "Garden Pond Guide"),
            (2, "Planning"),
            (2, "Depth"),
            (1, "Building")
        ]
    );
    let pages: Vec<u32> = doc.sections.iter().filter_map(|s| s.place.page).collect();
    assert_eq!(
        pages.len(),
        doc.sections.len(),
        "every PDF section has a page"
    );
    assert_eq!((pages[0], *pages.last().unwrap()), (1, 4));
    let pump = doc
        .sections
        .iter()
        .find(|s| s.text.starts_with("A pump should move"))
        .unwrap();
    assert_eq!(pump.place.page, Some(2));
    assert_eq!(
        pump.place.heading.as_deref(),
        Some("Building › Pump and filter")
    );
    // "Biologi-" at a line end and "cal" on the next are one word again.
    assert!(pump.text.contains("Biological filters"), "{}", pump.text);

    let chunks = chunk(&doc, &ChunkOptions::default());
    for c in &chunks {
        let pages: Vec<u32> = doc.sections[c.sections.clone()]
            .iter()
            .filter_map(|s| s.place.page)
            .collect();
        assert!(
            pages.iter().all(|&p| Some(p) == c.place.page),
            "chunk {} spans pages",
            c.index
        );
        assert!(c.text.chars().count() <= ChunkOptions::default().max_chars);
    }
    assert_eq!(chunks.first().unwrap().place.page, Some(1));
    assert_eq!(chunks.last().unwrap().place.page, Some(4));
}

#[test]
fn markdown_structure_is_recorded() {
    let doc = read("notes.md");
    assert_eq!(
        headings(&doc),
        [
            (1, "Home network notes"),
            (2, "Router"),
            (3, "Wi-Fi"),
            (2, "Printer"),
            (2, "Setext section")
        ]
    );
    let wifi: Vec<_> = doc
        .sections
        .iter()
        .filter(|s| s.kind == SectionKind::ListItem)
        .collect();
    assert_eq!(
        wifi[0].text,
        "home on 5 GHz, for laptops and phones in the living room;"
    );
    assert_eq!(
        wifi[0].place.heading.as_deref(),
        Some("Home network notes › Router › Wi-Fi")
    );
    assert!(doc
        .sections
        .iter()
        .any(|s| s.kind == SectionKind::Code && s.text.starts_with("lpadmin -p landing")));
    assert!(doc
        .sections
        .iter()
        .any(|s| s.kind == SectionKind::TableRow && s.text == "Printer | 192.168.1.20"));
    let router = doc
        .sections
        .iter()
        .find(|s| s.text.starts_with("The router"))
        .unwrap();
    assert!(
        router.text.contains("reset button for two seconds"),
        "{}",
        router.text
    );
    assert!(doc.sections.iter().all(|s| s.place.page.is_none()));
}

#[test]
fn html_structure_is_recorded_and_noise_skipped() {
    let doc = read("recipes.html");
    assert_eq!(
        headings(&doc),
        [
            (1, "Family recipes"),
            (2, "Lemon drizzle cake"),
            (3, "Ingredients"),
            (3, "Method"),
            (2, "Oven temperatures")
        ]
    );
    let all: String = doc
        .sections
        .iter()
        .map(|s| s.text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    for absent in ["never read", "font-family", "old comment", "analytics"] {
        assert!(!all.contains(absent), "{absent}");
    }
    assert!(all.contains("Grandma’s notebook"));
    // No-break spaces are whitespace like any other once text is normalised.
    assert!(all.contains("225 g butter & 225 g caster sugar"));
    assert!(all.contains("Bake at 160°C for 45–50 minutes"));
    assert!(all.contains("Gas mark | Fan °C"));
    assert!(all.contains("Timer: 45 min\nCheck: skewer"));
    let eggs = doc
        .sections
        .iter()
        .find(|s| s.text == "4 eggs, beaten")
        .unwrap();
    assert_eq!(eggs.kind, SectionKind::ListItem);
    assert_eq!(
        eggs.place.heading.as_deref(),
        Some("Family recipes › Lemon drizzle cake › Ingredients")
    );
}

#[test]
fn text_paragraphs_are_recorded() {
    let doc = read("letter.txt");
    assert_eq!(doc.sections.len(), 4);
    assert_eq!(doc.sections[3].text, "Thank you, Flat 4");
    assert!(doc.sections[1].text.starts_with("The residents' meeting"));
    assert!(doc.sections.iter().all(|s| s.place == Default::default()));
    let chunks = chunk(&doc, &ChunkOptions::default());
    assert_eq!(chunks.len(), 1, "a short letter is one chunk");
}

#[test]
fn long_paragraphs_split_with_overlap_within_bounds() {
    let sentence = "Stock no more than one small fish per fifty litres of pond water. ";
    let text = format!("Intro.\n\n{}\n\nOutro.", sentence.repeat(80));
    let doc = parse_document("long.txt", text.as_bytes()).unwrap();
    let opts = ChunkOptions::default();
    let chunks = chunk(&doc, &opts);
    assert!(chunks.len() >= 5, "{}", chunks.len());
    let sizes: Vec<usize> = chunks.iter().map(|c| c.text.chars().count()).collect();
    assert!(sizes.iter().all(|&n| n <= opts.max_chars), "{sizes:?}");
    // The split paragraph's pieces fill towards the target.
    assert!(
        sizes[1..sizes.len() - 1]
            .iter()
            .all(|&n| n >= opts.target_chars / 2),
        "{sizes:?}"
    );
    let split: Vec<_> = chunks.iter().filter(|c| c.sections == (1..2)).collect();
    assert!(split.len() >= 4);
    for pair in split.windows(2) {
        let repeated: String = pair[1].text.chars().take(pair[1].overlap_chars).collect();
        assert!(!repeated.is_empty());
        assert!(pair[0].text.ends_with(&repeated), "{repeated:?}");
    }
}

/// Whether an error is the variant a fixture should get.
type IsExpected = fn(&IngestError) -> bool;

/// A message a person can act on: names the file, says what to do, no blame, no jargon.
fn assert_readable(err: &IngestError, file: &str) {
    let msg = err.to_string();
    assert!(msg.contains(&format!("\"{file}\"")), "{msg}");
    let lower = msg.to_lowercase();
    assert!(
        ["add", "save", "split", "run ", "check"]
            .iter()
            .any(|w| lower.contains(w)),
        "no next step: {msg}"
    );
    for jargon in [
        "utf8error",
        "error",
        "invalid",
        "lopdf",
        "xref",
        "parse",
        "panic",
        "errno",
        "os error",
        "::",
        "{",
        "illegal",
        "corrupt",
        "you did",
        "your fault",
        "wrong",
        "bad ",
        "failed",
    ] {
        assert!(!lower.contains(jargon), "{jargon:?} in: {msg}");
    }
    assert!(msg.ends_with('.'), "{msg}");
}

#[test]
fn hostile_files_get_the_right_error_and_a_readable_message() {
    let cases: [(&str, IsExpected); 6] = [
        ("locked.pdf", |e| matches!(e, IngestError::Encrypted { .. })),
        ("scanned.pdf", |e| {
            matches!(e, IngestError::NoTextLayer { pages: 2, .. })
        }),
        ("latin1.txt", |e| {
            matches!(e, IngestError::NotUtf8 { offset: 30, .. })
        }),
        ("empty.txt", |e| matches!(e, IngestError::Empty { .. })),
        ("no-text.html", |e| matches!(e, IngestError::Empty { .. })),
        ("guide.ps", |e| matches!(e, IngestError::Unsupported { .. })),
    ];
    for (name, expected) in cases {
        let err = read_document(&fixture(name)).expect_err(name);
        assert!(expected(&err), "{name}: {err:?}");
        assert_readable(&err, name);
    }
    let missing = read_document(&fixture("missing.txt")).unwrap_err();
    assert!(
        matches!(missing, IngestError::Unreadable { .. }),
        "{missing:?}"
    );
    assert_readable(&missing, "missing.txt");
    let folder = read_document(&fixture("folder.md"));
    assert!(folder.is_err());

    let guide = std::fs::read(fixture("guide.pdf")).unwrap();
    // Cut short anywhere: refused whole, never read for what survives, never a panic.
    for cut in [
        0,
        10,
        100,
        guide.len() / 3,
        guide.len() / 2,
        guide.len() - 10,
    ] {
        let err = parse_document("cut.pdf", &guide[..cut]).unwrap_err();
        assert!(
            matches!(
                err,
                IngestError::MalformedPdf { .. } | IngestError::Empty { .. }
            ),
            "cut at {cut}: {err:?}"
        );
        assert_readable(&err, "cut.pdf");
    }
    // Bytes flipped inside the file: an error or a document, never a panic.
    for at in (0..guide.len()).step_by(97) {
        let mut damaged = guide.clone();
        damaged[at] ^= 0x5a;
        let _ = parse_document("damaged.pdf", &damaged);
    }
    let random = parse_document("random.pdf", b"\x89PNG\r\n\x1a\n not a pdf").unwrap_err();
    assert!(matches!(random, IngestError::MalformedPdf { .. }));
    assert_readable(&random, "random.pdf");
}

#[test]
fn size_limits_have_names_and_readable_messages() {
    assert_eq!(MAX_FILE_BYTES, 64 * 1024 * 1024);
    assert_eq!(MAX_PDF_PAGES, 2_000);
    let too_large = IngestError::TooLarge {
        name: "big.pdf".into(),
        size_mib: 70,
        limit_mib: 64,
    };
    assert_readable(&too_large, "big.pdf");
    assert_readable(
        &IngestError::TooManyPages {
            name: "long.pdf".into(),
            pages: 2_500,
            limit: MAX_PDF_PAGES,
        },
        "long.pdf",
    );
    assert_readable(
        &IngestError::MalformedPdf {
            name: "x.pdf".into(),
            detail: "xref parse error".into(),
        },
        "x.pdf",
    );
    // Over the cap without allocating 64 MiB: a sparse file.
    let dir = std::env::temp_dir().join(format!("kostant-documents-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("huge.txt");
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(MAX_FILE_BYTES + 1).unwrap();
    let err = read_document(&path).unwrap_err();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        matches!(
            err,
            IngestError::TooLarge {
                size_mib: 65,
                limit_mib: 64,
                ..
            }
        ),
        "{err:?}"
    );
    assert_readable(&err, "huge.txt");
}

#[test]
fn an_image_only_page_keeps_the_numbering_of_the_rest() {
    let doc = read("mixed.pdf");
    let pages: std::collections::BTreeSet<u32> =
        doc.sections.iter().filter_map(|s| s.place.page).collect();
    assert_eq!(pages.into_iter().collect::<Vec<_>>(), [1, 3]);
    let liner = doc
        .sections
        .iter()
        .find(|s| s.text.starts_with("Flexible EPDM"))
        .unwrap();
    assert_eq!(liner.place.page, Some(3));
}

#[test]
fn a_pdf_locked_only_against_editing_is_read() {
    // An owner password alone (empty user password) restricts editing, not reading.
    let open = read("owner-only.pdf");
    let plain = read("guide.pdf");
    assert_eq!(open.sections, plain.sections);
}
