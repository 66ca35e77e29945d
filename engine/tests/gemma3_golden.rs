//! Gemma 3 270M (Q4_K_M) on our engine against llama.cpp: the prompts tokenize to its ids, the
//! built-in Gemma turn format renders its chat prompt, and greedy continuations equal its ids
//! token for token (fixtures/generation_golden_gemma3.json; how it was recorded:
//! fixtures/README.md). The file is the pretrained model, so four prompts are plain text to
//! continue and one is a chat turn.

use kostant_engine::sampling::argmax;
use kostant_engine::{Message, Model, Role, Session};

fn fixtures() -> serde_json::Value {
    serde_json::from_str(include_str!("fixtures/generation_golden_gemma3.json"))
        .expect("fixture is JSON")
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn model() -> std::sync::Arc<Model> {
    Model::load(&kostant_engine::testing::gemma3_model_path()).unwrap()
}

#[test]
fn prompts_tokenize_as_llama_cpp_with_one_bos() {
    let model = model();
    let tok = &model.tokenizer;
    assert!(tok.add_bos());
    for case in fixtures()["cases"].as_array().unwrap() {
        let mut got = vec![tok.bos_id().unwrap()];
        got.extend(tok.encode(case["prompt"].as_str().unwrap(), true).unwrap());
        assert_eq!(got, ids(&case["prompt_ids"]), "{}", case["prompt"]);
    }
}

#[test]
fn the_gemma_turn_format_renders_the_reference_chat_prompt() {
    let model = model();
    let case = fixtures()["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["prompt"].as_str().unwrap().starts_with("<start_of_turn>"))
        .cloned()
        .expect("a chat case");
    let user = Message::new(Role::User, "Write a haiku about the sea.");
    let r = model
        .chat_template
        .render(&model.tokenizer, std::slice::from_ref(&user), true)
        .unwrap();
    assert_eq!(r.text, case["prompt"].as_str().unwrap());
    // One BOS, though the template text has none and the tokenizer adds one.
    assert_eq!(r.tokens, ids(&case["prompt_ids"]));

    // Gemma has no system role: a system message opens the first user turn.
    let system = Message::new(Role::System, "Be brief.");
    let r = model
        .chat_template
        .render(&model.tokenizer, &[system, user], true)
        .unwrap();
    assert_eq!(
        r.text,
        "<start_of_turn>user\nBe brief.\n\nWrite a haiku about the sea.<end_of_turn>\n<start_of_turn>model\n"
    );
}

#[test]
fn greedy_tokens_equal_llama_cpp() {
    let model = model();
    let stop = model.tokenizer.end_of_generation_ids();
    let mut report = Vec::new();
    for case in fixtures()["cases"].as_array().unwrap() {
        let want = ids(&case["generated_ids"]);
        let mut s = Session::new(model.clone(), 512).unwrap();
        let (mut logits, _) =
            kostant_engine::testing::prefill(&mut s, &ids(&case["prompt_ids"])).unwrap();
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
                "{:?}: differs at token {agree} (llama.cpp's top-1 margin there {})\n  ours {got:?}\n  ref  {want:?}",
                case["prompt"], case["top1_margins"][agree]
            ));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}
