//! The shipped feature adapters against llama.cpp's `--lora` on the real default model: each
//! adapter file in assets/adapters (its sha256 in the fixture, so a retrained adapter fails
//! here first, asking for the fixture to be recorded again), loaded by both engines over the
//! same base file, on two dev prompts per feature. How the fixture was recorded:
//! fixtures/README.md.
//!
//! The greedy replies are llama.cpp's, text for text, with the adapter and without. Near ties
//! are common with an adapter on (rewrite's first prompt has " you" and "." 0.06 logits apart),
//! so this holds only because the side path sums as ggml does, bit for bit: tinyBLAS's order
//! for a prompt, `ggml_vec_dot_f16`'s for one token (kostant_kernels::lora).

use std::path::PathBuf;

use kostant_engine::testing::{greedy_reply, real_model_path};
use kostant_engine::{ActiveAdapter, LoraAdapter, Model, Session};

#[test]
fn the_shipped_adapters_give_llama_cpps_greedy_replies() {
    let fx: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/adapter_golden.json")).unwrap();
    let model = Model::load(&real_model_path()).unwrap();
    let max = fx["max_new_tokens"].as_u64().unwrap() as usize;
    let assets = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../assets/adapters");
    let mut differs_from_base = 0;
    for case in fx["cases"].as_array().unwrap() {
        let feature = case["feature"].as_str().unwrap();
        let adapter = LoraAdapter::load(
            &assets.join(feature).join(format!("{feature}.gguf")),
            &model,
        )
        .unwrap();
        let hex: String = adapter
            .fingerprint()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            case["adapter_sha256"].as_str().unwrap(),
            "{feature}: the shipped adapter changed; record the fixture again"
        );
        let prompt = model
            .tokenizer
            .encode(case["prompt"].as_str().unwrap(), true)
            .unwrap();
        let line = case["dev_line"].as_u64().unwrap();
        let mut s = Session::new(model.clone(), 512).unwrap();
        s.set_adapter(Some(ActiveAdapter {
            adapter,
            scale: 1.0,
        }))
        .unwrap();
        let got = greedy_reply(&mut s, &prompt, max).unwrap();
        assert_eq!(
            got,
            case["lora_text"].as_str().unwrap(),
            "{feature} dev line {line} with the adapter"
        );
        s.set_adapter(None).unwrap();
        let base = greedy_reply(&mut s, &prompt, max).unwrap();
        assert_eq!(
            base,
            case["base_text"].as_str().unwrap(),
            "{feature} dev line {line} without the adapter"
        );
        differs_from_base += usize::from(got != base);
    }
    assert!(
        differs_from_base > 0,
        "the adapters changed no reply: the test would not see one missing"
    );
}
