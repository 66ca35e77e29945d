//! Architectures with no real weights here, checked against llama.cpp on tiny random-weight
//! GGUFs our writer makes (a golden with no download): Qwen3's shape (heads wider than
//! n_embd / n_head, per-head Q/K norm, NeoX rope, tied output). The file is rebuilt from the
//! fixture's spec (the writer is deterministic for a seed); llama.cpp's greedy ids were recorded
//! from the same bytes (fixtures/README.md).

use kostant_engine::gguf::Gguf;
use kostant_engine::sampling::argmax;
use kostant_engine::testing::{tiny_model_bytes, TinySpec};
use kostant_engine::{Model, Session};
use kostant_kernels::GgmlType;

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn tiny_qwen3_greedy_tokens_equal_llama_cpp() {
    let f: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/tiny_qwen3_golden.json")).unwrap();
    let s = &f["spec"];
    let n = |k: &str| s[k].as_u64().unwrap() as usize;
    assert_eq!(
        (s["matrix_type"].as_str(), s["embd_type"].as_str()),
        (Some("Q8_0"), Some("Q8_0"))
    );
    let spec = TinySpec {
        arch: "qwen3",
        n_embd: n("n_embd"),
        n_head: n("n_head"),
        n_head_kv: n("n_head_kv"),
        head_dim: Some(n("head_dim")),
        n_ff: n("n_ff"),
        n_layer: n("n_layer"),
        n_ctx: n("n_ctx"),
        matrix_type: GgmlType::Q8_0,
        embd_type: GgmlType::Q8_0,
        seed: s["seed"].as_u64().unwrap(),
        ..Default::default()
    };
    let model =
        Model::from_gguf(Gguf::from_bytes(tiny_model_bytes(&spec).unwrap()).unwrap()).unwrap();
    let want = ids(&f["generated_ids"]);
    let mut session = Session::new(model, 256).unwrap();
    let (mut logits, _) =
        kostant_engine::testing::prefill(&mut session, &ids(&f["prompt_ids"])).unwrap();
    let mut got = Vec::new();
    while got.len() < want.len() {
        let t = argmax(&logits);
        got.push(t);
        logits = kostant_engine::testing::step(&mut session, t).unwrap();
    }
    assert_eq!(got, want);
}
