//! The sentence encoder: shapes and refusals on a tiny random-weight `bert` GGUF, then the real
//! all-MiniLM-L6-v2 (tokenizer ids against the reference tokenizer, unit-length vectors that
//! rank similar sentences closer, a Q8_0 copy close to the F16 file).

mod encoder_support;

use encoder_support::{cosine, real_encoder_path, tiny_bytes, TinyBert};
use kostant_engine::gguf::{requantize, GgmlType, Gguf, GgufWriter, Value};
use kostant_engine::{Encoder, EngineError};

fn tiny(spec: &TinyBert) -> Encoder {
    Encoder::from_gguf(Gguf::from_bytes(tiny_bytes(spec)).expect("parse")).expect("load")
}

/// The tiny encoder's file rewritten: `meta` replaces (or with `None` drops) keys, `tensor`
/// maps each tensor (name, dims, type, data) to its replacement or drops it.
fn rewritten(
    meta: &[(&str, Option<Value>)],
    tensor: impl Fn(&str, &[usize], GgmlType, &[u8]) -> Option<(Vec<usize>, GgmlType, Vec<u8>)>,
) -> Result<Encoder, EngineError> {
    let g = Gguf::from_bytes(tiny_bytes(&TinyBert::default())).expect("parse");
    let mut w = GgufWriter::new();
    for (k, v) in g.metadata() {
        match meta.iter().find(|(key, _)| key == k) {
            Some((_, Some(new))) => w.metadata(k, new.clone()),
            Some((_, None)) => &mut w,
            None => w.metadata(k, v.clone()),
        };
    }
    for t in g.tensors() {
        if let Some((dims, ty, data)) = tensor(&t.name, &t.dims, t.ty, g.tensor_data(t)) {
            w.tensor(&t.name, &dims, ty, data);
        }
    }
    Encoder::from_gguf(Gguf::from_bytes(w.to_bytes()?)?)
}

fn keep(
    _: &str,
    dims: &[usize],
    ty: GgmlType,
    data: &[u8],
) -> Option<(Vec<usize>, GgmlType, Vec<u8>)> {
    Some((dims.to_vec(), ty, data.to_vec()))
}

fn error_text(r: Result<Encoder, EngineError>) -> String {
    match r {
        Ok(_) => panic!("the file was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn tiny_encoder_gives_unit_vectors_of_its_width() {
    let enc = tiny(&TinyBert::default());
    assert_eq!((enc.dim(), enc.max_tokens()), (64, 16));
    let v = enc.embed(&["the cat sat on the mat", "a dog", ""]).unwrap();
    assert_eq!(v.len(), 3);
    for e in &v {
        assert_eq!(e.len(), 64);
        let norm: f32 = e.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
    }
}

#[test]
fn tiny_tokenizer_undoes_the_phantom_space_spelling() {
    let enc = tiny(&TinyBert::default());
    // [CLS] the cat sat on the mat [SEP]; "running" is ▁run + ning, "cats" is ▁cat + s, and a
    // word outside the vocabulary is [UNK]; special tokens in the text are matched.
    assert_eq!(
        enc.token_ids("The cat sat on the mat").unwrap(),
        [2, 5, 6, 7, 8, 5, 9, 3]
    );
    assert_eq!(
        enc.token_ids("running cats zebra").unwrap(),
        [2, 14, 15, 6, 10, 1, 3]
    );
    assert_eq!(enc.token_ids("a [MASK].").unwrap(), [2, 13, 4, 12, 3]);
}

#[test]
fn long_texts_are_truncated_to_the_context_and_counted_whole() {
    let enc = tiny(&TinyBert::default());
    let text = "the cat ".repeat(20);
    assert_eq!(enc.count_tokens(&text).unwrap(), 42);
    let ids = enc.token_ids(&text).unwrap();
    assert_eq!(ids.len(), 16);
    assert_eq!((ids[0], ids[15]), (2, 3));
    assert_eq!(enc.embed(&[&text]).unwrap()[0].len(), 64);
}

#[test]
fn a_batch_embeds_each_text_as_it_would_alone() {
    let enc = tiny(&TinyBert::default());
    let texts = ["the cat sat", "a dog running on the mat", "cats"];
    let together = enc.embed(&texts).unwrap();
    for (t, v) in texts.iter().zip(&together) {
        let alone = &enc.embed(&[t]).unwrap()[0];
        assert!(cosine(alone, v) > 0.999_99, "{t}");
    }
}

#[test]
fn f32_q8_0_and_f16_weights_all_run() {
    let f16 = tiny(&TinyBert::default());
    for ty in [GgmlType::F32, GgmlType::Q8_0] {
        let other = tiny(&TinyBert {
            matrix_type: ty,
            ..TinyBert::default()
        });
        let (a, b) = (
            f16.embed(&["the cat sat"]).unwrap(),
            other.embed(&["the cat sat"]).unwrap(),
        );
        assert!(
            cosine(&a[0], &b[0]) > 0.99,
            "{ty:?}: {}",
            cosine(&a[0], &b[0])
        );
    }
}

#[test]
fn a_chat_model_is_refused_as_not_a_sentence_encoder() {
    let err = error_text(Encoder::load(&kostant_engine::testing::real_model_path()));
    assert!(err.contains("is not a sentence encoder"), "{err}");
}

#[test]
fn a_missing_tensor_is_named() {
    let err = error_text(rewritten(&[], |n, d, t, b| {
        (n != "blk.1.ffn_down.bias")
            .then(|| keep(n, d, t, b))
            .flatten()
    }));
    assert!(
        err.contains("tensor blk.1.ffn_down.bias is missing"),
        "{err}"
    );
}

#[test]
fn a_tensor_of_the_wrong_shape_is_named() {
    let err = error_text(rewritten(&[], |n, d, t, b| {
        if n == "blk.0.attn_q.weight" {
            // (64, 64) read as (32, 128): same bytes, wrong shape.
            Some((vec![128, 32], t, b.to_vec()))
        } else {
            keep(n, d, t, b)
        }
    }));
    assert!(
        err.contains("tensor blk.0.attn_q.weight: shape [128, 32]"),
        "{err}"
    );
}

#[test]
fn absurd_dimensions_are_refused() {
    for (key, v) in [
        ("bert.embedding_length", 1u32 << 30),
        ("bert.block_count", 100_000),
        ("bert.attention.head_count", 0),
        ("bert.context_length", u32::MAX),
    ] {
        let err = error_text(rewritten(&[(key, Some(Value::U32(v)))], keep));
        assert!(err.contains(key), "{key}: {err}");
    }
    let err = error_text(rewritten(
        &[("bert.attention.head_count", Some(Value::U32(5)))],
        keep,
    ));
    assert!(err.contains("not a multiple of the head count"), "{err}");
}

#[test]
fn a_causal_or_oddly_pooled_file_is_refused() {
    let causal = error_text(rewritten(
        &[("bert.attention.causal", Some(Value::Bool(true)))],
        keep,
    ));
    assert!(causal.contains("causal"), "{causal}");
    let pooled = error_text(rewritten(
        &[("bert.pooling_type", Some(Value::U32(4)))],
        keep,
    ));
    assert!(pooled.contains("pooling type 4"), "{pooled}");
}

#[test]
fn a_vocabulary_that_disagrees_with_the_embedding_is_refused() {
    let short = Value::Array(vec![Value::String("[PAD]".into())]);
    let err = error_text(rewritten(&[("tokenizer.ggml.tokens", Some(short))], keep));
    assert!(err.contains("tokenizer"), "{err}");
    let err = error_text(rewritten(
        &[("tokenizer.ggml.cls_token_id", Some(Value::U32(999)))],
        keep,
    ));
    assert!(err.contains("cls_token_id"), "{err}");
}

fn real() -> Encoder {
    Encoder::load(&real_encoder_path()).expect("load the real encoder")
}

#[test]
fn real_tokenizer_ids_equal_the_reference_tokenizer() {
    let enc = real();
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/encoder_tokenizer_ids.json")).unwrap();
    let cases = fixture["cases"].as_array().unwrap();
    assert!(cases.len() >= 20);
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(enc.token_ids(text).unwrap(), want, "{text:?}");
        assert_eq!(enc.count_tokens(text).unwrap(), want.len(), "{text:?}");
    }
}

#[test]
fn real_embeddings_are_unit_length_and_rank_by_meaning() {
    let enc = real();
    assert_eq!((enc.dim(), enc.max_tokens()), (384, 512));
    let v = enc
        .embed(&[
            "A man is playing a guitar.",
            "Someone is strumming a guitar.",
            "The stock market fell sharply today.",
        ])
        .unwrap();
    for e in &v {
        let norm: f32 = e.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
    }
    let (close, far) = (cosine(&v[0], &v[1]), cosine(&v[0], &v[2]));
    assert!(close > far + 0.3, "similar {close}, unrelated {far}");
}

#[test]
fn a_q8_0_copy_stays_close_to_the_f16_file() {
    let dir = std::env::temp_dir().join(format!("kostant-encoder-q8-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let q8_path = dir.join("all-MiniLM-L6-v2.Q8_0.gguf");
    requantize::requantize(&real_encoder_path(), &q8_path, GgmlType::Q8_0).unwrap();
    let q8 = Encoder::load(&q8_path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let texts = [
        "How do I reset my password?",
        "Cheap flights Paris to Tokyo in March",
        "Café crème brûlée, 東京, and 42 emoji 😀",
        "The cat sat on the mat.",
    ];
    let (a, b) = (real().embed(&texts).unwrap(), q8.embed(&texts).unwrap());
    for ((t, x), y) in texts.iter().zip(&a).zip(&b) {
        let c = cosine(x, y);
        assert!(c >= 0.99, "{t:?}: cosine {c}");
    }
}
