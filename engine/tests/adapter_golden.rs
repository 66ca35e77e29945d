//! The shipped feature adapters against llama.cpp's `--lora` on the real default model: each
//! adapter file in assets/adapters (its sha256 in the fixture, so a retrained adapter fails
//! here first, asking for the fixture to be recorded again), loaded by both engines over the
//! same base file, on two dev prompts per feature. How the fixture was recorded:
//! fixtures/README.md.
//!
//! Without the adapter the greedy replies are equal, text for text. With it they are not yet
//! (issue 21): fed llama.cpp's reply token by token, our top token is llama.cpp's at all but a
//! few positions, and where it is not, llama.cpp's token is within `MARGIN` of ours in logits,
//! a near tie that a last-bits difference in the side path tips. A wrong row order, scale or
//! rounding moves logits by whole units and fails here.

use std::path::PathBuf;

use kostant_engine::sampling::argmax;
use kostant_engine::testing::{prefill, real_model_path, step};
use kostant_engine::tokenizer::StreamDecoder;
use kostant_engine::{ActiveAdapter, LoraAdapter, Model, Session};

/// The greedy reply to `prompt`, decoded, up to `max` tokens or the end of generation.
fn reply(s: &mut Session, prompt: &[u32], max: usize) -> String {
    let model = s.model().clone();
    let stop = model.tokenizer.end_of_generation_ids();
    let (mut logits, _) = prefill(s, prompt).unwrap();
    let mut text = String::new();
    let mut decoder = StreamDecoder::new(&model.tokenizer);
    for _ in 0..max {
        let id = argmax(&logits);
        if stop.contains(&id) {
            break;
        }
        text.push_str(&decoder.push(id));
        logits = step(s, id).unwrap();
    }
    text
}

/// How far below our top logit llama.cpp's token may be where the two differ.
const MARGIN: f32 = 0.1;
/// The share of positions where the top tokens must agree.
const AGREE: f64 = 0.95;

#[test]
fn the_shipped_adapters_follow_llama_cpps_lora_token_by_token() {
    let fx: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/adapter_golden.json")).unwrap();
    let model = Model::load(&real_model_path()).unwrap();
    let max = fx["max_new_tokens"].as_u64().unwrap() as usize;
    let assets = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../assets/adapters");
    let (mut differs_from_base, mut agreed, mut positions) = (0, 0, 0);
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
        // Teacher-forced: llama.cpp's reply, token by token.
        let theirs = model
            .tokenizer
            .encode(case["lora_text"].as_str().unwrap(), false)
            .unwrap();
        let (mut logits, _) = prefill(&mut s, &prompt).unwrap();
        for &t in &theirs {
            let ours = argmax(&logits);
            positions += 1;
            if ours == t {
                agreed += 1;
            } else {
                let gap = logits[ours as usize] - logits[t as usize];
                assert!(
                    gap < MARGIN,
                    "{feature} dev line {line}: llama.cpp's token {t} is {gap} below ours ({ours})"
                );
            }
            logits = step(&mut s, t).unwrap();
        }
        s.reset();
        let got = reply(&mut s, &prompt, max);
        s.set_adapter(None).unwrap();
        let base = reply(&mut s, &prompt, max);
        assert_eq!(
            base,
            case["base_text"].as_str().unwrap(),
            "{feature} dev line {line} without the adapter"
        );
        differs_from_base += usize::from(got != base);
    }
    let share = agreed as f64 / positions as f64;
    assert!(
        share >= AGREE,
        "top tokens agree at {agreed} of {positions} positions"
    );
    assert!(
        differs_from_base > 0,
        "the adapters changed no reply: the test would not see one missing"
    );
}
