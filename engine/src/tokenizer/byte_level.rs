//! GPT-2's byte-level alphabet: every byte is spelled as one printable character, so that a
//! byte-level BPE vocabulary is a list of ordinary strings ("Ġthe" is " the").
//!
//! Printable Latin-1 bytes stand for themselves; the other 68 bytes (controls, space, DEL,
//! NBSP, soft hyphen) are mapped in byte order to U+0100 and up. This is the table of OpenAI's
//! `bytes_to_unicode`, which HF tokenizers and llama.cpp (`unicode_byte_to_utf8`) also use.

/// The character that spells byte `b`.
pub(crate) fn byte_to_char(b: u8) -> char {
    if is_self_spelled(b) {
        char::from(b)
    } else {
        let rank = (0..b).filter(|&x| !is_self_spelled(x)).count() as u32;
        char::from_u32(0x100 + rank).expect("U+0100..U+0143 are valid chars")
    }
}

/// A table from character to byte for the whole alphabet, built once per tokenizer so that
/// decoding a vocabulary of 100k+ tokens does not rescan byte ranges per character.
pub(crate) struct ByteDecoder {
    /// Indexed by code point for U+0000..U+0143; `None` where the char is not in the alphabet.
    table: [Option<u8>; 0x144],
}

impl ByteDecoder {
    pub(crate) fn new() -> ByteDecoder {
        let mut table = [None; 0x144];
        for b in 0..=255u8 {
            table[byte_to_char(b) as usize] = Some(b);
        }
        ByteDecoder { table }
    }

    /// Appends the bytes a byte-level token spells. A character outside the alphabet (which a
    /// well-formed vocabulary never holds) is kept as its own UTF-8, so nothing is dropped.
    pub(crate) fn decode_into(&self, token: &str, out: &mut Vec<u8>) {
        for c in token.chars() {
            match self.table.get(c as usize).copied().flatten() {
                Some(b) => out.push(b),
                None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
    }
}

/// Printable ASCII `!`..`~` and Latin-1 `¡`..`¬`, `®`..`ÿ` spell themselves.
fn is_self_spelled(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alphabet_round_trips_and_matches_gpt2() {
        let d = ByteDecoder::new();
        for b in 0..=255u8 {
            let c = byte_to_char(b);
            let mut out = Vec::new();
            d.decode_into(&c.to_string(), &mut out);
            assert_eq!(out, [b]);
        }
        // Well-known spellings: space is 'Ġ', newline is 'Ċ', tab is 'ĉ'.
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'\t'), 'ĉ');
        assert_eq!(byte_to_char(b'a'), 'a');
        // Characters outside the alphabet are kept as their own UTF-8.
        let mut out = Vec::new();
        d.decode_into("€\u{144}", &mut out);
        assert_eq!(out, "€\u{144}".as_bytes());
    }
}
