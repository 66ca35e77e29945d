//! HTML, read tolerantly without building a tree: the reader walks tags in order, so depth and
//! unclosed elements cost nothing. Headings h1–h6, paragraphs, list items, `pre`, `br` and table
//! rows become sections; `head`, `script`, `style`, `template`, `noscript` and `svg` are skipped;
//! character references are decoded (the common named ones and every numeric one).

use super::{Section, SectionBuilder, SectionKind};

/// Elements whose content is never text for the reader.
const SKIPPED: &[&str] = &[
    "head", "script", "style", "template", "noscript", "svg", "title",
];

/// Elements that end the block before them and start a new one.
const BLOCKS: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "main",
    "header",
    "footer",
    "nav",
    "aside",
    "blockquote",
    "ul",
    "ol",
    "dl",
    "dt",
    "dd",
    "figure",
    "figcaption",
    "caption",
    "table",
    "form",
    "hr",
    "address",
    "details",
    "summary",
    "body",
    "html",
];

pub(super) fn parse(html: &str) -> Vec<Section> {
    let mut r = Reader {
        b: SectionBuilder::default(),
        text: String::new(),
        kind: SectionKind::Paragraph,
        row: None,
    };
    let bytes = html.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'<' {
            let end = memchr(b'<', &bytes[i..]).map_or(bytes.len(), |n| i + n);
            r.push_text(&decode_entities(&html[i..end]));
            i = end;
            continue;
        }
        let rest = &html[i..];
        if let Some(comment) = rest.strip_prefix("<!--") {
            i = comment.find("-->").map_or(bytes.len(), |n| i + 4 + n + 3);
            continue;
        }
        if rest.starts_with("<!") || rest.starts_with("<?") {
            i = memchr(b'>', &bytes[i..]).map_or(bytes.len(), |n| i + n + 1);
            continue;
        }
        let Some(tag) = read_tag(rest) else {
            // A '<' that starts no tag is text.
            r.push_text("<");
            i += 1;
            continue;
        };
        i += tag.len;
        if !tag.closing && SKIPPED.contains(&tag.name.as_str()) {
            // Skip to the matching close tag (or the end of the file).
            i = find_close(html, i, &tag.name).unwrap_or(bytes.len());
            continue;
        }
        r.tag(&tag);
    }
    r.flush();
    r.b.finish()
}

struct Reader {
    b: SectionBuilder,
    /// Text of the block being gathered, whitespace as found (collapsed on flush unless code).
    text: String,
    kind: SectionKind,
    /// The cells of the table row being gathered, if inside one.
    row: Option<Vec<String>>,
}

impl Reader {
    fn push_text(&mut self, s: &str) {
        if let Some(row) = self.row.as_mut() {
            match row.last_mut() {
                Some(cell) => cell.push_str(s),
                None => row.push(s.to_string()),
            }
        } else {
            self.text.push_str(s);
        }
    }

    fn flush(&mut self) {
        let text = std::mem::take(&mut self.text);
        match self.kind {
            SectionKind::Heading(level) => self.b.heading(level, &text),
            SectionKind::Code => self.b.code(&text),
            kind => {
                // Two line breaks in a row (<br><br>) separate paragraphs in hand-written HTML.
                for part in text.split("\n\n") {
                    self.b.block(kind, part);
                }
            }
        }
        self.kind = SectionKind::Paragraph;
    }

    fn flush_row(&mut self) {
        if let Some(cells) = self.row.take() {
            let cells: Vec<String> = cells
                .iter()
                .map(|c| super::collapse_whitespace(c))
                .filter(|c| !c.is_empty())
                .collect();
            self.b.block(SectionKind::TableRow, &cells.join(" | "));
        }
    }

    fn tag(&mut self, tag: &Tag) {
        let name = tag.name.as_str();
        match name {
            "br" => {
                // Code keeps it as a line break; in prose a lone one is a space once collapsed,
                // and two make a paragraph break.
                self.push_text("\n");
                return;
            }
            "tr" => {
                self.flush();
                self.flush_row();
                if !tag.closing {
                    self.row = Some(Vec::new());
                }
                return;
            }
            "td" | "th" => {
                if !tag.closing {
                    self.row.get_or_insert_with(Vec::new).push(String::new());
                } else if let Some(row) = self.row.as_mut() {
                    row.push(String::new());
                }
                return;
            }
            "table" | "thead" | "tbody" | "tfoot" => {
                self.flush_row();
            }
            _ => {}
        }
        let heading = name
            .strip_prefix('h')
            .and_then(|d| d.parse::<u8>().ok())
            .filter(|l| (1..=6).contains(l));
        let starts_block =
            heading.is_some() || matches!(name, "li" | "pre") || BLOCKS.contains(&name);
        if !starts_block {
            // Inline elements separate words only when they are block-like in practice.
            return;
        }
        if self.row.is_some() && !matches!(name, "table") {
            // Block elements inside a cell stay in the cell.
            self.push_text(" ");
            return;
        }
        self.flush();
        if !tag.closing {
            self.kind = match (heading, name) {
                (Some(level), _) => SectionKind::Heading(level),
                (_, "li") => SectionKind::ListItem,
                (_, "pre") => SectionKind::Code,
                _ => SectionKind::Paragraph,
            };
        }
    }
}

struct Tag {
    name: String,
    closing: bool,
    /// Bytes from '<' through '>'.
    len: usize,
}

/// Reads the tag at the start of `s` (which starts with '<'); attributes are skipped, quoted
/// values included, so a '>' inside one does not end the tag.
fn read_tag(s: &str) -> Option<Tag> {
    let bytes = s.as_bytes();
    let mut i = 1;
    let closing = bytes.get(1) == Some(&b'/');
    if closing {
        i += 1;
    }
    let start = i;
    while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'-') {
        i += 1;
    }
    if i == start || !bytes[start].is_ascii_alphabetic() {
        return None;
    }
    let name = s[start..i].to_ascii_lowercase();
    let mut quote = None;
    while i < bytes.len() {
        match (quote, bytes[i]) {
            (None, b'>') => {
                return Some(Tag {
                    name,
                    closing,
                    len: i + 1,
                })
            }
            (None, q @ (b'"' | b'\'')) => quote = Some(q),
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
        i += 1;
    }
    // An unterminated tag runs to the end of the file.
    Some(Tag {
        name,
        closing,
        len: bytes.len(),
    })
}

/// The byte offset just past `</name ...>` at or after `from`, matched without case.
fn find_close(html: &str, from: usize, name: &str) -> Option<usize> {
    let bytes = html.as_bytes();
    let mut i = from;
    while let Some(n) = memchr(b'<', &bytes[i..]) {
        i += n;
        let after = &bytes[i + 1..];
        if after.first() == Some(&b'/')
            && after.len() > name.len()
            && after[1..=name.len()].eq_ignore_ascii_case(name.as_bytes())
            && !after
                .get(name.len() + 1)
                .is_some_and(|c| c.is_ascii_alphanumeric())
        {
            return Some(memchr(b'>', &bytes[i..]).map_or(bytes.len(), |m| i + m + 1));
        }
        i += 1;
    }
    None
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&b| b == needle)
}

/// Named character references decoded here: the ones that appear in real pages' prose.
const ENTITIES: &[(&str, &str)] = &[
    ("amp", "&"),
    ("lt", "<"),
    ("gt", ">"),
    ("quot", "\""),
    ("apos", "'"),
    ("nbsp", "\u{a0}"),
    ("shy", ""),
    ("copy", "©"),
    ("reg", "®"),
    ("trade", "™"),
    ("hellip", "…"),
    ("mdash", "—"),
    ("ndash", "–"),
    ("lsquo", "‘"),
    ("rsquo", "’"),
    ("sbquo", "‚"),
    ("ldquo", "“"),
    ("rdquo", "”"),
    ("bdquo", "„"),
    ("laquo", "«"),
    ("raquo", "»"),
    ("bull", "•"),
    ("middot", "·"),
    ("deg", "°"),
    ("euro", "€"),
    ("pound", "£"),
    ("yen", "¥"),
    ("cent", "¢"),
    ("sect", "§"),
    ("para", "¶"),
    ("times", "×"),
    ("divide", "÷"),
    ("plusmn", "±"),
    ("minus", "−"),
    ("frac12", "½"),
    ("frac14", "¼"),
    ("frac34", "¾"),
    ("micro", "µ"),
    ("larr", "←"),
    ("rarr", "→"),
    ("uarr", "↑"),
    ("darr", "↓"),
    ("iexcl", "¡"),
    ("iquest", "¿"),
    ("aacute", "á"),
    ("eacute", "é"),
    ("iacute", "í"),
    ("oacute", "ó"),
    ("uacute", "ú"),
    ("agrave", "à"),
    ("egrave", "è"),
    ("acirc", "â"),
    ("ecirc", "ê"),
    ("ocirc", "ô"),
    ("auml", "ä"),
    ("euml", "ë"),
    ("iuml", "ï"),
    ("ouml", "ö"),
    ("uuml", "ü"),
    ("Auml", "Ä"),
    ("Ouml", "Ö"),
    ("Uuml", "Ü"),
    ("Eacute", "É"),
    ("szlig", "ß"),
    ("ccedil", "ç"),
    ("ntilde", "ñ"),
    ("aring", "å"),
    ("oslash", "ø"),
    ("aelig", "æ"),
];

/// Decodes character references; one that is unknown or malformed stays as written.
fn decode_entities(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        // A reference is at most 32 bytes up to its ';'.
        let semi = rest.as_bytes().iter().take(34).position(|&b| b == b';');
        let decoded = semi.and_then(|semi| {
            let body = &rest[1..semi];
            let c = if let Some(num) = body.strip_prefix('#') {
                let code = match num.strip_prefix(['x', 'X']) {
                    Some(hex) => u32::from_str_radix(hex, 16).ok(),
                    None => num.parse::<u32>().ok(),
                }?;
                // NUL and invalid code points read as the replacement character, as browsers do.
                let c = char::from_u32(code)
                    .filter(|&c| c != '\0')
                    .unwrap_or('\u{fffd}');
                Some(c.to_string())
            } else {
                ENTITIES
                    .iter()
                    .find(|(n, _)| *n == body)
                    .map(|(_, v)| v.to_string())
            }?;
            Some((c, semi + 1))
        });
        match decoded {
            Some((text, len)) => {
                out.push_str(&text);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds_and_texts(s: &[Section]) -> Vec<(SectionKind, &str)> {
        s.iter().map(|s| (s.kind, s.text.as_str())).collect()
    }

    #[test]
    fn structure_is_read_and_noise_skipped() {
        let html = r#"<!DOCTYPE html><html><head><title>T</title><style>p{}</style></head>
<body><script>var x = "<p>not text</p>";</script>
<h1>Setup</h1><p>Intro &amp; <b>more</b>
text &#8212; done&#x21;</p>
<!-- a <p>comment</p> -->
<h2 class="x>y">Install</h2><ul><li>one<li>two &unknown; &lt;tag&gt;</ul>
<pre>line 1
  line 2</pre>
<p>first<br>same<br><br>second</p>
<table><tr><th>Name</th><th>Size</th></tr><tr><td>a</td><td><p>1</p></td></tr></table>
<h1>Use</h1>after</body></html>"#;
        let s = parse(html);
        assert_eq!(
            kinds_and_texts(&s),
            [
                (SectionKind::Heading(1), "Setup"),
                (SectionKind::Paragraph, "Intro & more text — done!"),
                (SectionKind::Heading(2), "Install"),
                (SectionKind::ListItem, "one"),
                (SectionKind::ListItem, "two &unknown; <tag>"),
                (SectionKind::Code, "line 1\n  line 2"),
                (SectionKind::Paragraph, "first same"),
                (SectionKind::Paragraph, "second"),
                (SectionKind::TableRow, "Name | Size"),
                (SectionKind::TableRow, "a | 1"),
                (SectionKind::Heading(1), "Use"),
                (SectionKind::Paragraph, "after"),
            ]
        );
        assert_eq!(s[4].place.heading.as_deref(), Some("Setup › Install"));
    }

    #[test]
    fn hostile_markup_never_panics() {
        let deep = "<div>".repeat(100_000) + "deep text" + &"</div>".repeat(100_000);
        let s = parse(&deep);
        assert_eq!(kinds_and_texts(&s), [(SectionKind::Paragraph, "deep text")]);
        for html in [
            "<",
            "</",
            "<a",
            "<a href='>",
            "&",
            "&#",
            "&#x;",
            "&#xFFFFFFFF;",
            "&#0;",
            "<script>",
            "<!--",
            "<!",
            "<?",
            "<td>x",
            "</tr></table>",
            "<h7>x</h7>",
            "<é>",
            "a < b",
        ] {
            let _ = parse(html);
        }
        assert_eq!(decode_entities("&#xFFFFFFFF; &#0;"), "\u{fffd} \u{fffd}");
    }
}
