//! Incremental detokenization for streaming: text comes out as soon as it is complete UTF-8.
//!
//! One character can span several tokens (an emoji is often four byte tokens), so bytes that
//! end in the middle of a UTF-8 sequence are held back until the sequence completes. Bytes that
//! can never become valid UTF-8 come out as U+FFFD at once. The concatenation of every `push`
//! and the final `flush` equals `Tokenizer::decode` of all the ids.

use super::Tokenizer;

/// Turns generated token ids into text, one id at a time.
pub struct StreamDecoder {
    tokenizer: Tokenizer,
    /// Bytes of an incomplete UTF-8 sequence (at most three) waiting for their continuation.
    pending: Vec<u8>,
    /// Whether an id has been pushed: the first one may lose a leading space, as in `decode`.
    started: bool,
}

impl StreamDecoder {
    /// A decoder over `tokenizer`'s vocabulary (a cheap handle clone, no borrow is kept).
    pub fn new(tokenizer: &Tokenizer) -> StreamDecoder {
        StreamDecoder {
            tokenizer: tokenizer.clone(),
            pending: Vec::new(),
            started: false,
        }
    }

    /// Adds one token and returns the text it completes, which may be empty. Control tokens
    /// add nothing, as in [`Tokenizer::decode`].
    pub fn push(&mut self, id: u32) -> String {
        let first = !std::mem::replace(&mut self.started, true);
        self.tokenizer
            .append_text_bytes(id, first, &mut self.pending);
        self.drain(false)
    }

    /// Ends the stream: whatever is still held (a sequence cut short) comes out as U+FFFD.
    pub fn flush(&mut self) -> String {
        self.drain(true)
    }

    /// Moves every complete character (and U+FFFD for every invalid sequence) out of `pending`,
    /// replacing invalid bytes exactly as `String::from_utf8_lossy` does on the whole stream.
    fn drain(&mut self, at_end: bool) -> String {
        let mut out = String::new();
        let mut rest = &self.pending[..];
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    out.push_str(text);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    out.push_str(&String::from_utf8_lossy(valid));
                    match e.error_len() {
                        // An invalid sequence: replace it and carry on after it.
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[n..];
                        }
                        // A sequence cut short by the end of the bytes so far: wait for more.
                        None if !at_end => {
                            rest = after;
                            break;
                        }
                        None => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &[];
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }
}
