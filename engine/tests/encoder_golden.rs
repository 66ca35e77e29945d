//! The sentence encoder on the real all-MiniLM-L6-v2 F16 GGUF against two reference runtimes
//! on the same 50 texts: sentence-transformers on the original f32 safetensors, and llama.cpp's
//! `llama-embedding` on our GGUF. How the fixtures were made is in
//! `tests/fixtures/encoder/README.md`.

mod encoder_support;

use encoder_support::{cosine, real_encoder_path};
use kostant_engine::Encoder;
use serde_json::Value;

/// Every text's vector must point where the reference's does, to this cosine.
const MIN_COSINE: f32 = 0.999;

/// Texts llama.cpp tokenizes differently from the model's own tokenizer (its WordPiece
/// preprocessing keeps one code point per Hangul syllable and drops spacing marks; see the
/// fixtures' README): 27 (Korean) and 32 (mixed scripts with Devanagari). Ours follows the
/// model's tokenizer, so on these it agrees with sentence-transformers and not with llama.cpp.
const LLAMA_CPP_TOKENIZES_DIFFERENTLY: [usize; 2] = [27, 32];

/// The `"texts"` of a fixture.
fn texts_of(v: &Value) -> Vec<String> {
    v["texts"]
        .as_array()
        .expect("texts")
        .iter()
        .map(|t| t.as_str().expect("a text").to_owned())
        .collect()
}

/// (texts, embeddings) of a fixture `{"texts": [...], "embeddings": [[f32; 384], ...]}`.
fn fixture(json: &str) -> (Vec<String>, Vec<Vec<f32>>) {
    let v: Value = serde_json::from_str(json).expect("fixture is JSON");
    let texts = texts_of(&v);
    let embeddings = v["embeddings"]
        .as_array()
        .expect("embeddings")
        .iter()
        .map(|e| {
            e.as_array()
                .expect("an embedding")
                .iter()
                .map(|x| x.as_f64().expect("a number") as f32)
                .collect()
        })
        .collect();
    (texts, embeddings)
}

fn texts() -> Vec<String> {
    texts_of(&serde_json::from_str(include_str!("fixtures/encoder/texts.json")).expect("JSON"))
}

/// Our embedding of every fixture text, in order.
fn ours(texts: &[String]) -> Vec<Vec<f32>> {
    let enc = Encoder::load(&real_encoder_path()).expect("load the real encoder");
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    enc.embed(&refs).expect("embed")
}

/// The texts whose cosine against `reference` is below [`MIN_COSINE`], with the cosine.
fn below(ours: &[Vec<f32>], reference: &[Vec<f32>]) -> Vec<(usize, f32)> {
    ours.iter()
        .zip(reference)
        .map(|(a, b)| cosine(a, b))
        .enumerate()
        .filter(|&(_, c)| c < MIN_COSINE)
        .collect()
}

#[test]
fn embeddings_match_both_reference_runtimes() {
    let texts = texts();
    assert_eq!(texts.len(), 50);
    let ours = ours(&texts);
    for e in &ours {
        assert_eq!(e.len(), 384);
    }

    let (st_texts, st) = fixture(include_str!("fixtures/encoder/reference_embeddings.json"));
    assert_eq!(st_texts, texts, "the reference is of the same texts");
    assert_eq!(
        below(&ours, &st),
        [],
        "below {MIN_COSINE} against sentence-transformers"
    );

    let (llama_texts, llama) = fixture(include_str!("fixtures/encoder/llama_embedding.json"));
    assert_eq!(
        llama_texts, texts,
        "llama.cpp's output is of the same texts"
    );
    let misses: Vec<usize> = below(&ours, &llama).into_iter().map(|(i, _)| i).collect();
    assert_eq!(
        misses, LLAMA_CPP_TOKENIZES_DIFFERENTLY,
        "below {MIN_COSINE} against llama-embedding"
    );
}
