//! Greedy generation on the real default model equals llama.cpp's, token for token, for the
//! prompts in fixtures/generation_golden.json (how they were recorded: fixtures/README.md).

use kostant_engine::sampling::argmax;
use kostant_engine::{Message, Model, Role, Session};

fn model_path() -> std::path::PathBuf {
    kostant_engine::testing::real_model_path()
}

fn fixtures() -> serde_json::Value {
    let text = include_str!("fixtures/generation_golden.json");
    serde_json::from_str(text).expect("fixture is JSON")
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn chat_template_renders_the_reference_prompt() {
    let model = Model::load(&model_path()).unwrap();
    for case in fixtures()["cases"].as_array().unwrap() {
        let q = case["question"].as_str().unwrap();
        let rendered = model
            .chat_template
            .render(&model.tokenizer, &[Message::new(Role::User, q)], true)
            .unwrap();
        assert_eq!(rendered.text, case["prompt"].as_str().unwrap());
        assert_eq!(rendered.tokens, ids(&case["prompt_ids"]), "{q}");
    }
}

/// Every prompt's greedy reply equals llama.cpp's id for id, including the steps where its own
/// top-1 margin is tiny (0.006 logits in "Explain photosynthesis"): the forward pass reproduces
/// ggml's rounding (fixtures/README.md), so no near-tie allowance is needed.
#[test]
fn greedy_tokens_equal_llama_cpp() {
    let model = Model::load(&model_path()).unwrap();
    let stop = model.tokenizer.end_of_generation_ids();
    let mut report = Vec::new();
    for case in fixtures()["cases"].as_array().unwrap() {
        let want = ids(&case["generated_ids"]);
        let mut s = Session::new(model.clone(), 512).unwrap();
        let (mut logits, _) =
            kostant_engine::testing::prefill(&mut s, &ids(&case["prompt_ids"])).unwrap();
        // The first position's logits agree to the fixture's 4 printed decimals.
        for pair in case["first_position_top5_logits"].as_array().unwrap() {
            let id = pair[0].as_u64().unwrap() as usize;
            let want = pair[1].as_f64().unwrap() as f32;
            if (logits[id] - want).abs() >= 2e-4 {
                report.push(format!(
                    "{:?}: first-position logit of {id}: ours {} ref {want}",
                    case["question"], logits[id]
                ));
            }
        }
        let mut got = Vec::new();
        while got.len() < want.len() {
            let t = argmax(&logits);
            got.push(t);
            if stop.contains(&t) {
                break;
            }
            logits = kostant_engine::testing::step(&mut s, t).unwrap();
        }
        if got != want {
            let agree = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
            report.push(format!(
                "{:?}: differs at token {agree}\n  ours {got:?}\n  ref  {want:?}",
                case["question"]
            ));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

#[test]
fn short_prompt_logits_equal_llama_cpp() {
    let model = Model::load(&model_path()).unwrap();
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/short_prompt_logits.json")).unwrap();
    for case in fixture["cases"].as_array().unwrap() {
        let mut s = Session::new(model.clone(), 64).unwrap();
        let (logits, _) = kostant_engine::testing::prefill(&mut s, &ids(&case["ids"])).unwrap();
        for pair in case["top5"].as_array().unwrap() {
            let id = pair[0].as_u64().unwrap() as usize;
            let want = pair[1].as_f64().unwrap() as f32;
            // The fixture is printed to 4 decimals; the engines agree below that.
            assert!(
                (logits[id] - want).abs() < 2e-4,
                "{:?} token {id}: ours {} ref {want}",
                case["ids"],
                logits[id]
            );
        }
    }
}
