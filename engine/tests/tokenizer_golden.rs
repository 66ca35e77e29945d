//! Our tokenizer against llama.cpp's on real GGUFs: token ids recorded by `llama-tokenize` for
//! tricky strings on SmolLM2 (byte-level BPE) and Gemma 3 (SentencePiece), and the prompt ids
//! of the generation fixture. How the fixtures were made is in `tests/fixtures/README.md`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kostant_engine::gguf::{Gguf, GgufWriter, Value as GgufValue};
use kostant_engine::tokenizer::{StreamDecoder, Tokenizer};
use serde_json::Value;

fn model_path() -> PathBuf {
    kostant_engine::testing::real_model_path()
}

fn tokenizer() -> Tokenizer {
    let g = Gguf::open(&model_path()).expect("open model");
    Tokenizer::from_gguf(&g).expect("build tokenizer")
}

/// The model's vocabulary under another pre-tokenizer, as llama.cpp saw it in a copy of the
/// GGUF with `tokenizer.ggml.pre` rewritten (see the fixtures' README).
fn tokenizer_with_pre(g: &Gguf, pre: &str) -> Tokenizer {
    tokenizer_from_copy(g.metadata(), Some(pre))
}

/// A tokenizer built from a GGUF holding only `metadata`'s `tokenizer.ggml.*` keys, with
/// `tokenizer.ggml.pre` replaced if `pre` is given.
fn tokenizer_from_copy(metadata: &BTreeMap<String, GgufValue>, pre: Option<&str>) -> Tokenizer {
    let mut w = GgufWriter::new();
    for (key, value) in metadata {
        if key.starts_with("tokenizer.ggml.") {
            w.metadata(key, value.clone());
        }
    }
    if let Some(pre) = pre {
        w.metadata("tokenizer.ggml.pre", GgufValue::String(pre.into()));
    }
    let copy = Gguf::from_bytes(w.to_bytes().expect("write copy")).expect("read copy");
    Tokenizer::from_gguf(&copy).unwrap_or_else(|e| panic!("pre {pre:?}: {e}"))
}

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an array of ids")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

fn stream(tok: &Tokenizer, ids: &[u32]) -> String {
    let mut dec = StreamDecoder::new(tok);
    let mut out: String = ids.iter().map(|&id| dec.push(id)).collect();
    out.push_str(&dec.flush());
    out
}

/// Every case of `fixture`: ids with and without special-token parsing equal llama.cpp's, and
/// the text comes back from them (unless the case is marked `lossy`).
fn check_golden_cases(tok: &Tokenizer, fixture_name: &str) {
    let golden = fixture(fixture_name);
    let cases = golden["cases"].as_array().expect("cases");
    assert!(cases.len() >= 30);
    let mut failures = Vec::new();
    for case in cases {
        let text = case["text"].as_str().expect("text");
        let want_special = ids(&case["ids_parse_special"]);
        let want_plain = ids(&case["ids_no_parse_special"]);
        let got_special = tok.encode(text, true).expect("encode");
        let got_plain = tok.encode(text, false).expect("encode");
        if got_special != want_special {
            failures.push(format!(
                "{text:?} parse_special:\n  ours  {got_special:?}\n  llama {want_special:?}"
            ));
        }
        if got_plain != want_plain {
            failures.push(format!(
                "{text:?} no parse_special:\n  ours  {got_plain:?}\n  llama {want_plain:?}"
            ));
        }
        if case["lossy"] == true {
            // The ids do not spell the text back (see the case's note); nothing to round-trip.
            continue;
        }
        // Without special parsing every id is text, so decoding gives the input back.
        assert_eq!(tok.decode(&got_plain), text, "decode(encode({text:?}))");
        assert_eq!(stream(tok, &got_plain), text, "streamed decode of {text:?}");
        // With special parsing, the tokens' raw bytes (control tokens as their text) still
        // spell the input exactly.
        let bytes: Vec<u8> = got_special
            .iter()
            .flat_map(|&id| tok.token_bytes(id))
            .collect();
        assert_eq!(bytes, text.as_bytes(), "token bytes of {text:?}");
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn ids_match_llama_cpp_and_text_round_trips() {
    check_golden_cases(&tokenizer(), "tokenizer_golden.json");
}

/// Gemma 3's SentencePiece vocabulary (262144 tokens, scores, byte fallback, user-defined
/// whitespace runs and HTML tags, no space prefix). Only the file's metadata is read, so the
/// test does not depend on the engine reading Gemma's tensor types.
fn gemma3_tokenizer() -> Tokenizer {
    let path = kostant_engine::testing::gemma3_model_path();
    let metadata = Gguf::read_metadata(&path).expect("read Gemma 3 metadata");
    tokenizer_from_copy(&metadata, None)
}

#[test]
fn gemma3_ids_match_llama_cpp_and_text_round_trips() {
    check_golden_cases(&gemma3_tokenizer(), "tokenizer_golden_gemma3.json");
}

#[test]
fn special_tokens_of_gemma3() {
    let tok = gemma3_tokenizer();
    assert_eq!(tok.vocab_size(), 262_144);
    assert_eq!(
        (tok.bos_id(), tok.eos_id(), tok.add_bos()),
        (Some(2), Some(1), true)
    );
    assert_eq!(tok.token_id("<start_of_turn>"), Some(105));
    assert_eq!(tok.token_id("<end_of_turn>"), Some(106));
    assert_eq!(tok.token_id("<0x0A>"), Some(248));
    assert!(tok.is_control(105) && tok.is_control(2) && !tok.is_control(107));
    // <eos>, <end_of_turn> and </s> end a reply (llama.cpp's EOG set for this GGUF); </s> is
    // stored user-defined but llama.cpp makes it a control token.
    assert_eq!(tok.end_of_generation_ids(), [1, 106, 212]);
    assert!(tok.is_control(212));
    assert_eq!(tok.decode(&[212]), "");
    assert_eq!(tok.token_bytes(105), b"<start_of_turn>");
    assert_eq!(tok.token_bytes(107), b"\n");
    assert_eq!(tok.token_bytes(248), b"\n");
    // No space prefix for Gemma: decoding keeps a leading space.
    let ids = tok.encode(" Hello", false).unwrap();
    assert_eq!(tok.decode(&ids), " Hello");
}

#[test]
fn other_pre_tokenizers_match_llama_cpp() {
    let g = Gguf::open(&model_path()).expect("open model");
    let golden = fixture("tokenizer_golden.json");
    let cases = golden["cases"].as_array().expect("cases");
    let pres = cases[0]["ids_by_pre"].as_object().expect("ids_by_pre");
    assert!(pres.len() >= 4);
    let mut failures = Vec::new();
    for pre in pres.keys() {
        let tok = tokenizer_with_pre(&g, pre);
        for case in cases {
            let text = case["text"].as_str().expect("text");
            let want = ids(&case["ids_by_pre"][pre]);
            let got = tok.encode(text, true).expect("encode");
            if got != want {
                failures.push(format!(
                    "{pre} {text:?}:\n  ours  {got:?}\n  llama {want:?}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn generation_prompts_encode_like_llama_cpp() {
    let tok = tokenizer();
    let golden = fixture("generation_golden.json");
    let cases = golden["cases"].as_array().expect("cases");
    assert!(cases.len() >= 5);
    for case in cases {
        let prompt = case["prompt"].as_str().expect("prompt");
        assert_eq!(
            tok.encode(prompt, true).unwrap(),
            ids(&case["prompt_ids"]),
            "prompt {prompt:?}"
        );
        // llama.cpp's own detokenization of its generated ids (EOS not included) is ours too.
        let generated = ids(&case["generated_ids"]);
        let eog = tok.end_of_generation_ids();
        let text_ids: Vec<u32> = generated
            .iter()
            .copied()
            .take_while(|id| !eog.contains(id))
            .collect();
        assert_eq!(
            tok.decode(&text_ids),
            case["generated_text"].as_str().unwrap(),
            "reply to {prompt:?}"
        );
        assert_eq!(
            stream(&tok, &text_ids),
            case["generated_text"].as_str().unwrap()
        );
    }
}

#[test]
fn special_tokens_of_smollm2() {
    let tok = tokenizer();
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(
        (tok.bos_id(), tok.eos_id(), tok.add_bos()),
        (Some(1), Some(2), false)
    );
    assert_eq!(tok.token_id("<|im_start|>"), Some(1));
    assert_eq!(tok.token_id("<|im_end|>"), Some(2));
    assert!(tok.is_control(0) && tok.is_control(2) && !tok.is_control(19556));
    // <|im_end|> is EOS; <|endoftext|> ends generation too (llama.cpp's EOG set for this GGUF).
    assert_eq!(tok.end_of_generation_ids(), [0, 2]);
    assert_eq!(tok.token_bytes(1), b"<|im_start|>");
    assert_eq!(tok.token_bytes(38699), b" Hello");
}
