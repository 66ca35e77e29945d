//! A small JSON reader for schemas: objects keep their keys in the order written (a schema's
//! properties come out in that order), errors give the line and column, and nesting is capped.

use crate::{EngineError, Result};

/// Deepest nesting of arrays and objects read.
const MAX_DEPTH: usize = 128;

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    /// The number as written, so that a constant comes out exactly as the schema spells it.
    Number(String),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(kv) => kv.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// Compact JSON text, as a constant must appear in the output.
    pub fn dump(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Number(n) => out.push_str(n),
            Json::String(s) => write_string(s, out),
            Json::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write(out);
                }
                out.push(']');
            }
            Json::Object(kv) => {
                out.push('{');
                for (i, (k, v)) in kv.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(k, out);
                    out.push(':');
                    v.write(out);
                }
                out.push('}');
            }
        }
    }
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Reads one JSON document (nothing but blanks may follow it).
pub(crate) fn parse(text: &str) -> Result<Json> {
    let mut r = Reader {
        text,
        bytes: text.as_bytes(),
        at: 0,
        depth: 0,
    };
    r.blanks();
    let v = r.value()?;
    r.blanks();
    if r.at < r.bytes.len() {
        return Err(r.error("unexpected text after the JSON document"));
    }
    Ok(v)
}

struct Reader<'t> {
    text: &'t str,
    bytes: &'t [u8],
    at: usize,
    depth: usize,
}

impl Reader<'_> {
    fn error(&self, what: &str) -> EngineError {
        let before = &self.text[..self.at.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[start..].chars().count() + 1;
        EngineError::JsonSchema(format!("line {line}, column {column}: {what}"))
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn blanks(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, b: u8) -> Result<()> {
        if self.peek() != Some(b) {
            return Err(self.error(&format!("expected '{}'", b as char)));
        }
        self.at += 1;
        Ok(())
    }

    fn value(&mut self) -> Result<Json> {
        match self.peek() {
            Some(b'{') => self.nested(Reader::object),
            Some(b'[') => self.nested(Reader::array),
            Some(b'"') => Ok(Json::String(self.string()?)),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b't') => self.word("true", Json::Bool(true)),
            Some(b'f') => self.word("false", Json::Bool(false)),
            Some(b'n') => self.word("null", Json::Null),
            Some(_) => Err(self.error("expected a JSON value")),
            None => Err(self.error("unexpected end of the JSON document")),
        }
    }

    fn nested(&mut self, read: fn(&mut Self) -> Result<Json>) -> Result<Json> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(&format!("nested more than {MAX_DEPTH} deep")));
        }
        let v = read(self)?;
        self.depth -= 1;
        Ok(v)
    }

    fn word(&mut self, w: &str, v: Json) -> Result<Json> {
        if !self.text[self.at..].starts_with(w) {
            return Err(self.error("expected a JSON value"));
        }
        self.at += w.len();
        Ok(v)
    }

    fn number(&mut self) -> Result<Json> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        let digits = |r: &mut Self| {
            let s = r.at;
            while r.peek().is_some_and(|b| b.is_ascii_digit()) {
                r.at += 1;
            }
            r.at > s
        };
        if !digits(self) {
            return Err(self.error("expected a digit"));
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if !digits(self) {
                return Err(self.error("expected a digit after '.'"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if !digits(self) {
                return Err(self.error("expected a digit in the exponent"));
            }
        }
        Ok(Json::Number(self.text[start..self.at].to_string()))
    }

    fn string(&mut self) -> Result<String> {
        self.expect(b'"')?;
        let mut s = String::new();
        loop {
            let Some(c) = self.text[self.at..].chars().next() else {
                return Err(self.error("unterminated string"));
            };
            match c {
                '"' => {
                    self.at += 1;
                    return Ok(s);
                }
                '\\' => {
                    self.at += 1;
                    s.push(self.escape()?);
                }
                c if (c as u32) < 0x20 => {
                    return Err(self.error("control character in a string"));
                }
                c => {
                    s.push(c);
                    self.at += c.len_utf8();
                }
            }
        }
    }

    fn escape(&mut self) -> Result<char> {
        let e = self
            .peek()
            .ok_or_else(|| self.error("unterminated string"))?;
        self.at += 1;
        Ok(match e {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hi = self.hex4()?;
                if (0xD800..0xDC00).contains(&hi) && self.text[self.at..].starts_with("\\u") {
                    self.at += 2;
                    let lo = self.hex4()?;
                    let c = 0x10000 + ((hi - 0xD800) << 10) + (lo.wrapping_sub(0xDC00) & 0x3FF);
                    char::from_u32(c).unwrap_or('\u{FFFD}')
                } else {
                    char::from_u32(hi).unwrap_or('\u{FFFD}')
                }
            }
            _ => {
                self.at -= 1;
                return Err(self.error("unknown escape in a string"));
            }
        })
    }

    fn hex4(&mut self) -> Result<u32> {
        let h = self.text.get(self.at..self.at + 4).unwrap_or("");
        match u32::from_str_radix(h, 16) {
            Ok(v) if h.len() == 4 && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                self.at += 4;
                Ok(v)
            }
            _ => Err(self.error("expected 4 hexadecimal digits after \\u")),
        }
    }

    fn array(&mut self) -> Result<Json> {
        self.expect(b'[')?;
        let mut items = Vec::new();
        self.blanks();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Json::Array(items));
        }
        loop {
            self.blanks();
            items.push(self.value()?);
            self.blanks();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(self.error("expected ',' or ']' in the array")),
            }
        }
    }

    fn object(&mut self) -> Result<Json> {
        self.expect(b'{')?;
        let mut kv = Vec::new();
        self.blanks();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Json::Object(kv));
        }
        loop {
            self.blanks();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a key in double quotes"));
            }
            let k = self.string()?;
            self.blanks();
            self.expect(b':')?;
            self.blanks();
            let v = self.value()?;
            kv.push((k, v));
            self.blanks();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Json::Object(kv));
                }
                _ => return Err(self.error("expected ',' or '}' in the object")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_key_order_and_spelling() {
        let v = parse(r#"{"b": [1, -2.5e3, true, null], "a": "x\n\u00e9\ud83d\ude00"}"#).unwrap();
        assert_eq!(v.dump(), "{\"b\":[1,-2.5e3,true,null],\"a\":\"x\\né😀\"}");
    }

    #[test]
    fn errors_give_line_and_column() {
        let e = parse("{\n  \"a\": 1,\n  \"b\" 2\n}")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "json schema: line 3, column 7: expected ':'");
        let e = parse("[1, 2").unwrap_err().to_string();
        assert_eq!(
            e,
            "json schema: line 1, column 6: expected ',' or ']' in the array"
        );
        let e = parse(&"[".repeat(1000)).unwrap_err().to_string();
        assert!(e.contains("nested more than"), "{e}");
    }
}
