//! Unit tests on tiny hand-built vocabularies (byte-level BPE, then SentencePiece), written to
//! an in-memory GGUF.

use super::*;
use crate::gguf::{GgufWriter, Value};

/// Ids 0..=2 are control tokens, 3..259 the 256 byte tokens, then merged tokens.
const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
const MERGES: [&str; 6] = ["h e", "l l", "he ll", "hell o", "Ġ w", "Ġw o"];
const MERGED: [&str; 6] = ["he", "ll", "hell", "hello", "Ġw", "Ġwo"];

fn tokens() -> Vec<String> {
    let bytes = (0..=255u8).map(|b| byte_level::byte_to_char(b).to_string());
    SPECIALS
        .iter()
        .map(|s| s.to_string())
        .chain(bytes)
        .chain(MERGED.iter().map(|s| s.to_string()))
        .collect()
}

fn strings(v: impl IntoIterator<Item = impl Into<String>>) -> Value {
    Value::Array(v.into_iter().map(|s| Value::String(s.into())).collect())
}

/// A complete, valid tokenizer description; tests break one piece of it at a time.
fn writer() -> GgufWriter {
    let toks = tokens();
    let types: Vec<Value> = (0..toks.len())
        .map(|i| Value::I32(if i < SPECIALS.len() { 3 } else { 1 }))
        .collect();
    let mut w = GgufWriter::new();
    w.metadata("tokenizer.ggml.model", Value::String("gpt2".into()))
        .metadata("tokenizer.ggml.pre", Value::String("smollm".into()))
        .metadata("tokenizer.ggml.tokens", strings(toks))
        .metadata("tokenizer.ggml.token_type", Value::Array(types))
        .metadata("tokenizer.ggml.merges", strings(MERGES))
        .metadata("tokenizer.ggml.bos_token_id", Value::U32(1))
        .metadata("tokenizer.ggml.eos_token_id", Value::U32(2))
        .metadata("tokenizer.ggml.add_bos_token", Value::Bool(false));
    w
}

fn build(w: &GgufWriter) -> Result<Tokenizer> {
    Tokenizer::from_gguf(&Gguf::from_bytes(w.to_bytes().expect("writer")).expect("reader"))
}

fn error_of(w: &GgufWriter) -> String {
    match build(w) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

fn id(tok: &Tokenizer, text: &str) -> u32 {
    tok.token_id(text)
        .unwrap_or_else(|| panic!("{text:?} not in vocab"))
}

#[test]
fn encodes_merges_specials_and_round_trips() {
    let tok = build(&writer()).unwrap();
    assert_eq!(tok.vocab_size(), 3 + 256 + MERGED.len());
    let (hello, wo) = (id(&tok, "hello"), id(&tok, "Ġwo"));
    let (r, l, d) = (id(&tok, "r"), id(&tok, "l"), id(&tok, "d"));
    assert_eq!(
        tok.encode("hello world", false).unwrap(),
        [hello, wo, r, l, d]
    );

    let chat = "<|im_start|>hello<|im_end|>";
    assert_eq!(tok.encode(chat, true).unwrap(), [1, hello, 2]);
    let plain = tok.encode(chat, false).unwrap();
    assert!(plain.len() > 3 && !plain.contains(&1) && !plain.contains(&2));
    assert_eq!(tok.decode(&plain), chat);
    // Control tokens are not rendered by decode, but token_bytes gives their text.
    assert_eq!(tok.decode(&[1, hello, 2]), "hello");
    assert_eq!(tok.token_bytes(2), b"<|im_end|>");
    assert!(tok.is_control(1) && !tok.is_control(hello));
    assert_eq!(tok.token_bytes(id(&tok, "Ġwo")), b" wo");
    assert_eq!(tok.token_bytes(u32::MAX), b"");
    // eos (2) plus <|endoftext|> (0) found by its text.
    assert_eq!(tok.end_of_generation_ids(), [0, 2]);
    assert_eq!(
        (tok.bos_id(), tok.eos_id(), tok.add_bos()),
        (Some(1), Some(2), false)
    );

    // Digits are split one by one by the smollm pre-tokenizer; emoji fall back to bytes.
    let s = "12 🦀é\n";
    let ids = tok.encode(s, true).unwrap();
    assert_eq!(ids[..2], [id(&tok, "1"), id(&tok, "2")]);
    assert_eq!(tok.decode(&ids), s);
}

#[test]
fn stream_decoder_holds_split_characters_until_complete() {
    let tok = build(&writer()).unwrap();
    let ids = tok.encode("a🦀b", false).unwrap();
    assert_eq!(ids.len(), 6, "one id per byte here");
    let mut dec = StreamDecoder::new(&tok);
    let out: Vec<String> = ids.iter().map(|&i| dec.push(i)).collect();
    assert_eq!(out, ["a", "", "", "", "🦀", "b"]);
    assert_eq!(dec.flush(), "");

    // A cut-off character comes out as U+FFFD at the end, like decode's lossy conversion.
    let mut dec = StreamDecoder::new(&tok);
    let partial = &ids[..3];
    let mut streamed: String = partial.iter().map(|&i| dec.push(i)).collect();
    streamed.push_str(&dec.flush());
    assert_eq!(streamed, tok.decode(partial));
    assert_eq!(streamed, "a\u{FFFD}");
    // An invalid byte in the middle is replaced at once, then decoding carries on.
    let mut dec = StreamDecoder::new(&tok);
    let lone_continuation = id(&tok, &byte_level::byte_to_char(0x80).to_string());
    assert_eq!(dec.push(lone_continuation), "\u{FFFD}");
    assert_eq!(dec.push(ids[0]), "a");
}

#[test]
fn user_defined_tokens_are_split_out_even_without_special_parsing() {
    // Append a user-defined token (type 4) and an unknown-type token (type 2).
    let mut toks = tokens();
    toks.extend(["<tool>".to_string(), "<unk>".to_string()]);
    let mut types: Vec<Value> = (0..toks.len())
        .map(|i| Value::I32(if i < SPECIALS.len() { 3 } else { 1 }))
        .collect();
    let n = types.len();
    types[n - 2] = Value::I32(4);
    types[n - 1] = Value::I32(2);
    let mut w = writer();
    w.metadata("tokenizer.ggml.tokens", strings(toks))
        .metadata("tokenizer.ggml.token_type", Value::Array(types));
    let tok = build(&w).unwrap();
    let (tool, unk) = ((n - 2) as u32, (n - 1) as u32);
    let (a, b) = (id(&tok, "a"), id(&tok, "b"));
    for parse_special in [false, true] {
        assert_eq!(tok.encode("a<tool>b", parse_special).unwrap(), [a, tool, b]);
    }
    // User-defined tokens are text: decode renders them. Unknown tokens behave like control.
    assert_eq!(tok.decode(&[a, tool, b]), "a<tool>b");
    assert_eq!(tok.encode("<unk>", true).unwrap(), [unk]);
    assert_ne!(tok.encode("<unk>", false).unwrap(), [unk]);
    assert_eq!(tok.decode(&[a, unk]), "a");
}

#[test]
fn unknown_pre_tokenizer_is_named() {
    let mut w = writer();
    w.metadata("tokenizer.ggml.pre", Value::String("martian".into()));
    let err = error_of(&w);
    assert!(
        err.starts_with("tokenizer: unsupported pre-tokenizer \"martian\""),
        "{err}"
    );
}

#[test]
fn missing_merges_are_an_error() {
    let toks = tokens();
    let mut w = GgufWriter::new();
    w.metadata("tokenizer.ggml.model", Value::String("gpt2".into()))
        .metadata("tokenizer.ggml.pre", Value::String("smollm".into()))
        .metadata("tokenizer.ggml.tokens", strings(toks));
    let err = error_of(&w);
    assert!(err.contains("no merges (tokenizer.ggml.merges)"), "{err}");
}

#[test]
fn malformed_merge_is_named() {
    let mut w = writer();
    w.metadata("tokenizer.ggml.merges", strings(["h e", "nospace"]));
    let err = error_of(&w);
    assert!(err.contains("merge 1 (\"nospace\")"), "{err}");
}

#[test]
fn token_type_length_must_match_tokens() {
    let mut w = writer();
    w.metadata(
        "tokenizer.ggml.token_type",
        Value::Array(vec![Value::I32(1); 7]),
    );
    let err = error_of(&w);
    assert!(
        err.contains("token_type has 7 entries for 265 tokens"),
        "{err}"
    );
}

#[test]
fn token_type_out_of_range_is_named() {
    let mut types = vec![Value::I32(1); tokens().len()];
    types[5] = Value::I32(9);
    let mut w = writer();
    w.metadata("tokenizer.ggml.token_type", Value::Array(types));
    let err = error_of(&w);
    assert!(err.contains("token 5 (\"Ă\") has type 9"), "{err}");
}

#[test]
fn unsupported_models_are_named() {
    let mut w = writer();
    w.metadata("tokenizer.ggml.model", Value::String("bert".into()));
    let err = error_of(&w);
    assert!(
        err.contains("unsupported tokenizer model \"bert\" (WordPiece)"),
        "{err}"
    );
}

#[test]
fn bytes_without_a_token_are_dropped_like_llama_cpp() {
    // SmolLM2 has no token for byte 0x04, among others; llama.cpp drops such bytes silently.
    let mut toks = tokens();
    toks[3 + usize::from(b'A')] = "AA".into();
    let mut w = writer();
    w.metadata("tokenizer.ggml.tokens", strings(toks));
    let tok = build(&w).unwrap();
    assert_eq!(
        tok.encode("bAd", false).unwrap(),
        [id(&tok, "b"), id(&tok, "d")]
    );
}

#[test]
fn add_bos_without_bos_is_an_error() {
    let mut w = writer();
    w.metadata("tokenizer.ggml.add_bos_token", Value::Bool(true))
        .metadata("tokenizer.ggml.bos_token_id", Value::U32(100_000));
    let err = error_of(&w);
    assert!(err.contains("add_bos_token is set"), "{err}");
}

#[test]
fn tokenizer_is_send_sync_and_cheap_to_clone() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Tokenizer>();
    let tok = build(&writer()).unwrap();
    assert!(Arc::ptr_eq(&tok.inner, &tok.clone().inner));
}

// SentencePiece ("llama") vocabularies.

/// Control and special tokens, then a user-defined newline and double space (as Gemma has),
/// then the 256 byte tokens, then pieces with scores.
const SPM_SPECIALS: [(&str, i32); 8] = [
    ("<pad>", 3),
    ("<eos>", 3),
    ("<bos>", 3),
    ("<unk>", 2),
    ("<start_of_turn>", 3),
    ("<end_of_turn>", 3),
    ("\n", 4),
    ("  ", 4),
];
const SPM_BYTES: u32 = SPM_SPECIALS.len() as u32;
const SPM_PIECES: [(&str, f32); 19] = [
    ("▁", -10.0),
    ("h", -10.0),
    ("e", -10.0),
    ("l", -10.0),
    ("o", -10.0),
    ("w", -10.0),
    ("r", -10.0),
    ("d", -10.0),
    ("he", -5.0),
    ("ll", -4.0),
    ("hell", -3.0),
    ("hello", -2.0),
    ("▁hello", -1.0),
    ("▁w", -6.0),
    ("▁wo", -5.0),
    ("or", -7.0),
    ("▁wor", -4.0),
    ("ld", -6.0),
    ("▁world", -1.0),
];

fn spm_writer() -> GgufWriter {
    let mut tokens: Vec<String> = SPM_SPECIALS.iter().map(|t| t.0.to_string()).collect();
    let mut types: Vec<Value> = SPM_SPECIALS.iter().map(|t| Value::I32(t.1)).collect();
    let mut scores = vec![Value::F32(-1000.0); SPM_SPECIALS.len()];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(Value::I32(6));
        scores.push(Value::F32(0.0));
    }
    for (t, score) in SPM_PIECES {
        tokens.push(t.to_string());
        types.push(Value::I32(1));
        scores.push(Value::F32(score));
    }
    let mut w = GgufWriter::new();
    w.metadata("tokenizer.ggml.model", Value::String("llama".into()))
        .metadata("tokenizer.ggml.pre", Value::String("default".into()))
        .metadata("tokenizer.ggml.tokens", strings(tokens))
        .metadata("tokenizer.ggml.token_type", Value::Array(types))
        .metadata("tokenizer.ggml.scores", Value::Array(scores))
        .metadata("tokenizer.ggml.bos_token_id", Value::U32(2))
        .metadata("tokenizer.ggml.eos_token_id", Value::U32(1))
        .metadata("tokenizer.ggml.unknown_token_id", Value::U32(3))
        .metadata("tokenizer.ggml.add_space_prefix", Value::Bool(false));
    w
}

fn byte(b: u8) -> u32 {
    SPM_BYTES + u32::from(b)
}

#[test]
fn spm_merges_by_score_splits_specials_and_round_trips() {
    let tok = build(&spm_writer()).unwrap();
    assert_eq!(
        tok.vocab_size(),
        SPM_SPECIALS.len() + 256 + SPM_PIECES.len()
    );
    let (hello, world) = (id(&tok, "hello"), id(&tok, "▁world"));
    assert_eq!(tok.encode("hello world", false).unwrap(), [hello, world]);
    assert_eq!(tok.decode(&[hello, world]), "hello world");
    // No BOS from encode; add_bos defaults to true for SentencePiece.
    assert_eq!(
        (tok.bos_id(), tok.eos_id(), tok.add_bos()),
        (Some(2), Some(1), true)
    );

    // Characters outside the vocabulary fall back to byte tokens; "\n" and "  " are
    // user-defined, so split out whether or not special tokens are parsed.
    let chat = "<start_of_turn>us  er\nhello<end_of_turn>";
    let (e, r) = (id(&tok, "e"), id(&tok, "r"));
    let user = [byte(b'u'), byte(b's'), 7, e, r, 6];
    let mut want = vec![4];
    want.extend(user);
    want.extend([hello, 5]);
    assert_eq!(tok.encode(chat, true).unwrap(), want);
    let plain = tok.encode(chat, false).unwrap();
    assert!(!plain.contains(&4) && !plain.contains(&5) && plain.contains(&6));
    assert_eq!(tok.decode(&plain), chat);
    let bytes: Vec<u8> = want.iter().flat_map(|&i| tok.token_bytes(i)).collect();
    assert_eq!(bytes, chat.as_bytes());
    assert_eq!(tok.decode(&want), "us  er\nhello");

    // token_id looks up the stored spelling; token_bytes undoes it.
    assert_eq!(tok.token_id("<start_of_turn>"), Some(4));
    assert_eq!(tok.token_id(" world"), None);
    assert_eq!(tok.token_bytes(world), b" world");
    assert_eq!(tok.token_bytes(byte(0xA9)), [0xA9]);
    assert!(tok.is_control(4) && !tok.is_control(6) && !tok.is_control(hello));
    // EOS plus <end_of_turn>, found by its text.
    assert_eq!(tok.end_of_generation_ids(), [1, 5]);

    // Multi-byte characters: byte tokens, streamed without splitting a character.
    let s = "é🦀 hello";
    let ids = tok.encode(s, false).unwrap();
    assert_eq!(ids[..2], [byte(0xC3), byte(0xA9)]);
    assert_eq!(tok.decode(&ids), s);
    let mut dec = StreamDecoder::new(&tok);
    let mut streamed: String = ids.iter().map(|&i| dec.push(i)).collect();
    streamed.push_str(&dec.flush());
    assert_eq!(streamed, s);
}

#[test]
fn spm_space_prefix_is_added_when_encoding_and_dropped_when_decoding() {
    // add_space_prefix is true when the key is absent, as in llama.cpp.
    let mut g = Gguf::from_bytes(spm_writer().to_bytes().unwrap()).unwrap();
    let mut w = GgufWriter::new();
    for (key, value) in g.metadata() {
        if key != "tokenizer.ggml.add_space_prefix" {
            w.metadata(key, value.clone());
        }
    }
    g = Gguf::from_bytes(w.to_bytes().unwrap()).unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap();
    let (hello, world) = (id(&tok, "▁hello"), id(&tok, "▁world"));
    assert_eq!(tok.encode("hello world", false).unwrap(), [hello, world]);
    // After a special token the next text gets the prefix again.
    assert_eq!(
        tok.encode("hello<end_of_turn>world", true).unwrap(),
        [hello, 5, world]
    );
    // llama_detokenize drops the first token's leading space, BOS or not first.
    assert_eq!(tok.decode(&[hello, world]), "hello world");
    assert_eq!(tok.decode(&[2, hello]), " hello");
    let mut dec = StreamDecoder::new(&tok);
    assert_eq!(dec.push(hello), "hello");
    assert_eq!(dec.push(world), " world");
}

#[test]
fn spm_hostile_scores_are_refused() {
    let n = SPM_SPECIALS.len() + 256 + SPM_PIECES.len();
    let mut w = spm_writer();
    w.metadata(
        "tokenizer.ggml.scores",
        Value::Array(vec![Value::F32(0.0); n - 1]),
    );
    let err = error_of(&w);
    assert!(
        err.contains(&format!("scores has {} entries for {n} tokens", n - 1)),
        "{err}"
    );
    let mut scores = vec![Value::F32(0.0); n];
    scores[n - 1] = Value::F32(f32::NAN);
    let mut w = spm_writer();
    w.metadata("tokenizer.ggml.scores", Value::Array(scores));
    let err = error_of(&w);
    assert!(err.contains("(\"▁world\") has score NaN"), "{err}");
    let mut w = spm_writer();
    w.metadata("tokenizer.ggml.scores", strings(vec!["x"; n]));
    let err = error_of(&w);
    assert!(err.contains("tokenizer.ggml.scores"), "{err}");
}
